"""``sandgrid serve`` logs the grid's lines: uvicorn's own logging config is not used."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from sandgrid.wire.logs import JsonFormatter, OneLineTextFormatter
from sandgrid.wire.settings import get_settings
from scheduler.cli import serve


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    get_settings.cache_clear()
    yield seen
    get_settings.cache_clear()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    logging.captureWarnings(False)


@pytest.mark.parametrize(
    ("fmt", "formatter"), [("json", JsonFormatter), ("text", OneLineTextFormatter)]
)
def test_serve_sets_the_grids_formatter_and_no_uvicorn_config(
    ran: dict[str, Any], monkeypatch: pytest.MonkeyPatch, fmt: str, formatter: type
) -> None:
    monkeypatch.setenv("SANDGRID_LOG_FORMAT", fmt)
    result = CliRunner().invoke(serve, ["--access-log", "--log-level", "warning"])
    assert result.exit_code == 0, result.output
    assert ran["log_config"] is None and ran["access_log"] is True
    assert ran["log_level"] == "warning"
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler.formatter, formatter)
    assert logging.getLogger().level == logging.WARNING
