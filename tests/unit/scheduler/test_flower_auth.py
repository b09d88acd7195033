"""Flower's /metrics handler is wrapped with Flower's own authentication."""

from __future__ import annotations

from pathlib import Path

import pytest
from flower.views import monitor

from scheduler.flower import PASSWORD_FILE_ENV, USER_ENV, basic_auth_from_file, protect_metrics


def test_metrics_handler_requires_an_authenticated_user() -> None:
    original = monitor.Metrics.get
    try:
        protect_metrics()
        wrapped = monitor.Metrics.get
        protect_metrics()  # idempotent: wrapped once
        assert monitor.Metrics.get is wrapped
        assert wrapped is not original and wrapped.__wrapped__ is original  # type: ignore[attr-defined]
    finally:
        monitor.Metrics.get = original  # type: ignore[method-assign]


def test_password_comes_from_the_file(tmp_path: Path) -> None:
    """23.6: the password file becomes FLOWER_BASIC_AUTH inside the process."""
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    env = {PASSWORD_FILE_ENV: str(pw)}
    assert basic_auth_from_file(env)
    assert env["FLOWER_BASIC_AUTH"] == "admin:s3cret"
    env = {PASSWORD_FILE_ENV: str(pw), USER_ENV: "ops"}
    basic_auth_from_file(env)
    assert env["FLOWER_BASIC_AUTH"] == "ops:s3cret"


def test_no_file_named_leaves_the_environment_alone() -> None:
    env = {"FLOWER_BASIC_AUTH": "admin:given"}
    assert not basic_auth_from_file(env)
    assert env == {"FLOWER_BASIC_AUTH": "admin:given"}


@pytest.mark.parametrize("content", [None, ""])
def test_a_missing_or_empty_file_refuses_to_start_open(tmp_path: Path, content: str | None) -> None:
    pw = tmp_path / "pw"
    if content is not None:
        pw.write_text(content)
    with pytest.raises(SystemExit, match=PASSWORD_FILE_ENV):
        basic_auth_from_file({PASSWORD_FILE_ENV: str(pw)})
