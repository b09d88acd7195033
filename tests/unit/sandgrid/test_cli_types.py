"""``sandgrid types ls|show|add|rm`` (25.1) against the in-process API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandgrid.cli import main
from tests.support.fakes import Grid

ADMIN = "tok-admin-" + "y" * 24
DIGEST = "sha256:" + "e" * 64


@pytest.fixture
def cli(grid: Grid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's clients speak to the in-process app, with the token they were given."""
    import sandgrid.client

    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN + "\n")
    settings = grid.services.settings.model_copy(update={"admin_token_file": token_file})
    monkeypatch.setattr(grid.services, "settings", settings)
    assert grid.services.types is not None
    grid.services.types.resolve = lambda image: DIGEST

    def client(*_: Any, token: str | None = None, **__: Any) -> Any:
        return grid.client(token)

    monkeypatch.setattr(sandgrid.client, "Client", client)
    return token_file


def test_add_show_ls_rm(grid: Grid, cli: Path) -> None:
    add = [
        "types", "add", "python-small", "--image", "sandgrid/sandbox-python:latest",
        "--quota", "memory_mb=256", "--pool-size", "1", "--pool-max", "4",
        "--admin-token-file", str(cli),
    ]  # fmt: skip
    out = CliRunner().invoke(main, add)
    assert out.exit_code == 0, out.output
    assert f"python-small added (sandgrid/sandbox-python:latest {DIGEST})" in out.stdout
    shown = CliRunner().invoke(main, ["types", "show", "python-small"])
    assert shown.exit_code == 0 and '"memory_mb": 256' in shown.stdout
    assert '"pool_max": 4' in shown.stdout
    listed = CliRunner().invoke(main, ["types", "ls"])
    assert listed.exit_code == 0 and "python-small" in listed.stdout
    rm = CliRunner().invoke(main, ["types", "rm", "python-small", "--admin-token-file", str(cli)])
    assert rm.exit_code == 0 and "python-small removed" in rm.stdout


def test_a_tenants_token_cannot_add_and_a_bad_quota_is_named(grid: Grid, cli: Path) -> None:
    base = ["types", "add", "python-x", "--image", "a/b:1"]
    refused = CliRunner().invoke(main, base)  # the tenant's token
    assert refused.exit_code == 1 and "error[unauthenticated]" in refused.stderr
    bad = CliRunner().invoke(main, [*base, "--quota", "memory_mb", "--admin-token-file", str(cli)])
    assert bad.exit_code == 1 and "--quota: 'memory_mb' is not key=number" in bad.stderr
    typo = CliRunner().invoke(
        main, [*base, "--quota", "memroy_mb=1", "--admin-token-file", str(cli)]
    )
    assert typo.exit_code == 1 and "'memroy_mb' is no quota" in typo.stderr


def test_add_from_a_file(grid: Grid, cli: Path, tmp_path: Path) -> None:
    more = tmp_path / "more.toml"
    more.write_text('[[type]]\nname = "python-f"\nimage = "a/b:1"\nruntime = "runsc"\n')
    out = CliRunner().invoke(
        main, ["types", "add", "-f", str(more), "--admin-token-file", str(cli)]
    )
    assert out.exit_code == 0, out.output
    assert grid.http.get("/v1/types/python-f", headers=grid.headers()).json()["runtime"] == "runsc"
