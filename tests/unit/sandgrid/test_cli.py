"""The sandgrid command: readable errors, exit codes, tenants add."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from sandgrid.cli import main
from sandgrid.wire import names
from sandgrid.wire.settings import Settings, get_settings
from scheduler.tenants import TenantStore
from tests.support.fakes import Grid


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, test_settings: Settings) -> Iterator[None]:
    monkeypatch.setenv("SANDGRID_REDIS_URL", test_settings.redis_url)
    monkeypatch.setenv("SANDGRID_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SANDGRID_TOKEN", "sg_x")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_tenants_add_prints_a_token_once(env: None, redis_client: redis.Redis[str]) -> None:
    out = CliRunner().invoke(main, ["tenants", "add", "acme", "--max-sessions", "5"])
    assert out.exit_code == 0, out.output
    token = out.stdout.strip()
    assert token.startswith("sg_")
    tenant = TenantStore(redis_client).authenticate(token)
    assert tenant.name == "acme" and tenant.limits.max_sessions == 5
    assert token not in str(redis_client.hgetall(names.tokens_key()))


def test_bad_tenant_name_is_a_readable_error(env: None, redis_client: redis.Redis[str]) -> None:
    out = CliRunner().invoke(main, ["tenants", "add", "Bad Name"])
    assert out.exit_code == 1 and "error[invalid_input]" in out.stderr
    assert "Traceback" not in out.output


def test_unreachable_api_is_a_readable_error(env: None) -> None:
    out = CliRunner().invoke(main, ["exec", "--", "python3", "-c", "print(1)"])
    assert out.exit_code == 1, out.output
    assert "error[api_unreachable]" in out.stderr and "Traceback" not in out.output


def test_exec_prints_output_and_exits_with_the_code(
    env: None, grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sandgrid.client

    monkeypatch.setattr(sandgrid.client, "Client", lambda *a, **k: grid.client())
    ok = CliRunner().invoke(main, ["exec", "--type", "python", "--", "echo", "hi"])
    assert ok.exit_code == 0 and ok.stdout == "echo hi\n"
    failed = CliRunner().invoke(main, ["exec", "--", "false", "-x"])
    assert failed.exit_code == 3
    listed = CliRunner().invoke(main, ["sessions", "ls"])
    assert listed.exit_code == 0 and "s-" not in listed.stdout  # one-shot sessions are closed


def test_sessions_close_unknown(env: None, grid: Grid, monkeypatch: pytest.MonkeyPatch) -> None:
    import sandgrid.client

    monkeypatch.setattr(sandgrid.client, "Client", lambda *a, **k: grid.client())
    out = CliRunner().invoke(main, ["sessions", "close", "s-" + "0" * 32])
    assert out.exit_code == 1 and "error[not_found]" in out.stderr


def test_worker_command_without_worker_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "worker.cli", None)  # as with `pip install sandgrid`
    out = CliRunner().invoke(main, ["worker", "--types", "python", "--node", "w1"])
    assert out.exit_code != 0 and "`sandgrid worker` needs the 'worker' extra" in out.output
