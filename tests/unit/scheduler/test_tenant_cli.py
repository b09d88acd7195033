"""23.16: ``sandgrid tenants set|rotate|revoke|show``, run as a user runs them (CliRunner).

A bad value exits 1 naming the field and the rule, and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from sandgrid.cli import main
from sandgrid.errors import AuthError
from sandgrid.wire import names
from sandgrid.wire.settings import Settings, get_settings
from scheduler.tenant_flags import LIMIT_FIELDS, flag
from scheduler.tenants import TenantStore


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, test_settings: Settings) -> Iterator[None]:
    monkeypatch.setenv("SANDGRID_REDIS_URL", test_settings.redis_url)
    monkeypatch.delenv("SANDGRID_TENANTS_FILE", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def tenants(*argv: str) -> Result:
    return CliRunner().invoke(main, ["tenants", *argv])


@pytest.fixture
def token(env: None, redis_client: redis.Redis[str]) -> str:
    out = tenants("add", "acme", "--max-turns", "4")
    assert out.exit_code == 0, out.output
    return out.stdout.strip()


def test_every_limit_has_a_flag(env: None) -> None:
    out = tenants("set", "--help")
    assert out.exit_code == 0
    for field in LIMIT_FIELDS:
        assert flag(field) in out.stdout
    assert "--clear FIELD" in out.stdout


def test_set_every_kind_of_flag(token: str, redis_client: redis.Redis[str]) -> None:
    out = tenants(
        "set",
        "acme",
        "--max-sessions",
        "7",
        "--allow-network",
        "true",
        "--types",
        "python,python-gvisor",
        "--network-ceiling",
        "pypi.org:443,*.pythonhosted.org",
        "--network-ceiling",
        "10.1.0.0/16",
        "--network-default",
        '{"allow": ["pypi.org:443"], "max_connections": 50}',
    )
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    assert shown["max_sessions"] == 7 and shown["allow_network"] is True
    assert shown["types"] == ["python", "python-gvisor"]
    assert shown["network_ceiling"] == ["pypi.org:443", "*.pythonhosted.org", "10.1.0.0/16"]
    assert shown["network_default"]["allow"] == ["pypi.org:443"]
    assert "limits of 1 token(s) set" in out.stderr
    limits = TenantStore(redis_client).authenticate(token).limits
    assert limits.max_sessions == 7 and limits.max_concurrent_turns == 4  # the rest is kept
    cleared = tenants("set", "acme", "--clear", "types", "--clear", "network-default")
    assert cleared.exit_code == 0, cleared.output
    assert json.loads(cleared.stdout)["types"] is None
    assert json.loads(cleared.stdout)["network_default"] is None
    empty = tenants("set", "acme", "--network-ceiling", "")
    assert empty.exit_code == 0 and json.loads(empty.stdout)["network_ceiling"] == []
    show = tenants("show", "acme")
    assert show.exit_code == 0 and json.loads(show.stdout)["network_ceiling"] == []
    assert token not in show.output


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--network-ceiling", "pypi.org,10.0.0.0/33"], "network_ceiling[1]: entry '10.0.0.0/33'"),
        (["--network-ceiling", "bad host"], "network_ceiling[0]"),
        (["--max-sessions", "-3"], "max_sessions: Input should be greater than or equal to 0"),
        (["--max-cpus", "many"], "max_cpus: Input should be a valid number"),
        (["--allow-network", "perhaps"], "allow_network: Input should be a valid boolean"),
        (["--types", "pyhton"], "types[0]: unknown sandbox type 'pyhton'"),
        (["--network-default", "{allow"], "network_default: not JSON"),
        (["--network-default", '{"allow": ["10.0.0.5"]}'], "network_default.allow[0]"),
        (["--max-sessions", "3", "--clear", "max_sessions"], "max_sessions: given and cleared"),
        (["--clear", "colour"], "unknown limit 'colour'"),
        ([], "give a limit to set"),
    ],
)
def test_a_bad_value_names_its_field_and_changes_nothing(
    token: str, redis_client: redis.Redis[str], argv: list[str], named: str
) -> None:
    before = redis_client.hgetall(names.tokens_key())
    out = tenants("set", "acme", *argv)
    assert out.exit_code == 1, out.output
    assert "error[invalid_input]" in out.stderr and named in out.stderr, out.stderr
    assert "Traceback" not in out.output
    assert redis_client.hgetall(names.tokens_key()) == before


def test_add_validates_as_set(env: None, redis_client: redis.Redis[str]) -> None:
    out = tenants("add", "acme", "--network-ceiling", "10.0.0.0/33")
    assert out.exit_code == 1 and "network_ceiling[0]" in out.stderr
    assert not redis_client.hgetall(names.tokens_key())


def test_rotate_prints_a_new_token_once_and_refuses_the_old(
    token: str, redis_client: redis.Redis[str]
) -> None:
    out = tenants("rotate", "acme")
    assert out.exit_code == 0, out.output
    new = out.stdout.strip()
    assert new.startswith("sg_") and new != token
    assert "1 old token(s) refused from now on" in out.stderr
    store = TenantStore(redis_client, cache_s=0)
    with pytest.raises(AuthError):
        store.authenticate(token)
    assert store.authenticate(new).limits.max_concurrent_turns == 4
    assert new not in json.dumps(redis_client.hgetall(names.tokens_key()))


def test_revoke_refuses_every_token(token: str, redis_client: redis.Redis[str]) -> None:
    out = tenants("revoke", "acme")
    assert out.exit_code == 0 and "1 token(s) revoked" in out.stderr, out.output
    with pytest.raises(AuthError):
        TenantStore(redis_client, cache_s=0).authenticate(token)
    again = tenants("revoke", "acme")
    assert again.exit_code == 1 and "error[not_found]" in again.stderr


def test_a_file_tenant_is_changed_in_its_file(
    env: None, redis_client: redis.Redis[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "tenants.json"
    f.write_text(json.dumps([{"name": "filed", "token": "file-token"}]))
    monkeypatch.setenv("SANDGRID_TENANTS_FILE", str(f))
    get_settings.cache_clear()
    for argv in (["rotate", "filed"], ["revoke", "filed"], ["set", "filed", "--max-pids", "9"]):
        out = tenants(*argv)
        assert out.exit_code == 1 and "tenants file" in out.stderr, out.output
    listed = tenants("ls")
    assert listed.exit_code == 0 and "filed" in listed.stdout


def test_unreachable_redis_is_a_readable_error(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGRID_REDIS_URL", "redis://127.0.0.1:1/0")
    get_settings.cache_clear()
    for argv in (["rotate", "acme"], ["ls"], ["show", "acme"]):
        out = tenants(*argv)
        assert out.exit_code == 1 and "Redis at redis://127.0.0.1:1/0 unreachable" in out.stderr


def test_types_are_checked_against_the_registrys_catalog(
    token: str, redis_client: redis.Redis[str]
) -> None:
    """25.1: a type added by API is a known type for ``--types``; a typo is still refused."""
    from sandgrid.sandbox_types import SandboxTypeSpec
    from sandgrid.wire.type_store import TypeStore

    store = TypeStore(redis_client)
    store.seed([SandboxTypeSpec(name="python", image="a/b:1", runtime="runc", source="file")])
    store.put(SandboxTypeSpec(name="python-small", image="a/b:1", runtime="runc"))
    ok = tenants("set", "acme", "--types", "python,python-small")
    assert ok.exit_code == 0, ok.output
    typo = tenants("set", "acme", "--types", "python-smal")
    assert typo.exit_code == 1 and "types[0]: unknown sandbox type 'python-smal'" in typo.stderr
