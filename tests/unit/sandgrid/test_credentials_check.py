"""A worker or the API refuses the shipped credentials unless told to (23.19)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sandgrid.wire.credentials import insecure_defaults, refusal
from sandgrid.wire.settings import MinioSettings, Settings
from tests.support.deploy_state import deploy_script, fake_state

ROOT = Path(__file__).resolve().parents[3]
GOOD_REDIS = "redis://sg-api:pw-0123456789@127.0.0.1:6379/0"
GOOD_MINIO = MinioSettings(access_key="sg-1234", secret_key="generated-secret")


def test_generated_credentials_pass() -> None:
    s = Settings(redis_url=GOOD_REDIS, minio=GOOD_MINIO, allow_insecure_defaults=False)
    assert insecure_defaults(s) == [] and refusal(s, "the API") is None


@pytest.mark.parametrize(
    ("redis_url", "minio", "names"),
    [
        ("redis://127.0.0.1:6379/0", GOOD_MINIO, "SANDGRID_REDIS_URL"),
        ("redis://sg-api@127.0.0.1:6379/0", GOOD_MINIO, "SANDGRID_REDIS_URL"),
        (GOOD_REDIS, MinioSettings(), "SANDGRID_MINIO__ACCESS_KEY"),
        (GOOD_REDIS, MinioSettings(access_key="sg-1"), "SANDGRID_MINIO__ACCESS_KEY"),
    ],
)
def test_shipped_defaults_are_refused(redis_url: str, minio: MinioSettings, names: str) -> None:
    s = Settings(redis_url=redis_url, minio=minio, allow_insecure_defaults=False)
    message = refusal(s, "a worker")
    assert message is not None and names in message and "make services" in message


def test_tests_may_allow_them() -> None:
    s = Settings(redis_url="redis://127.0.0.1:6379/0", allow_insecure_defaults=True)
    assert insecure_defaults(s) and refusal(s, "the API") is None


@pytest.mark.parametrize("command", [["serve", "--port", "1"], ["worker", "--node", "x"]])
def test_the_entry_points_exit_with_the_reason(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adversarial: nothing starts listening or consuming on the well-known credentials."""
    from sandgrid.cli import main

    monkeypatch.delenv("SANDGRID_ALLOW_INSECURE_DEFAULTS", raising=False)
    monkeypatch.setenv("SANDGRID_REDIS_URL", "redis://127.0.0.1:1/0")
    for var in ("SANDGRID_MINIO__ACCESS_KEY", "SANDGRID_MINIO__SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    from sandgrid.wire.settings import get_settings

    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(main, command)
    finally:
        get_settings.cache_clear()
    assert result.exit_code != 0
    assert (
        "refusing to start" in result.output and "SANDGRID_ALLOW_INSECURE_DEFAULTS" in result.output
    )


def test_redis_acl_file_has_roles_and_no_password(tmp_path: Path) -> None:
    pws = fake_state(tmp_path)
    out = deploy_script("deploy/local/redis_acl.py", str(tmp_path / "secrets.env"))
    lines = out.splitlines()
    assert lines[0].startswith("user default off")
    assert {ln.split()[1] for ln in lines[1:]} == {
        "sg-admin",
        "sg-api",
        "sg-worker",
        "sg-flower",
        "sg-metrics",
    }
    assert not any(pw in out for pw in pws.values())
    metrics = next(ln for ln in lines if ln.startswith("user sg-metrics"))
    assert "-@all +@read" in metrics and "+@all" not in metrics
