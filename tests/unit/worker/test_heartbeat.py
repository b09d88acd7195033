"""The heartbeat says when a beat came late: the node's record was close to lapsing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from worker.heartbeat import NODE_TTL_BEATS, Heartbeat
from worker.sessions.table import SessionTable


class Ledger:
    """Records each beat's node, TTL and types."""

    def __init__(self) -> None:
        self.beats: list[tuple[str, float, tuple[str, ...]]] = []

    def heartbeat(self, node: str, ttl: float, **kw: Any) -> None:
        self.beats.append((node, ttl, tuple(kw["types"])))


def _heartbeat(ledger: Ledger) -> Heartbeat:
    return Heartbeat("n1", ledger, SessionTable(), None, 3.0, types=["python"])  # type: ignore[arg-type]


def test_a_late_beat_is_logged_and_an_on_time_one_is_not(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    monkeypatch.setattr("worker.heartbeat.time.monotonic", lambda: now[0])
    ledger = Ledger()
    hb = _heartbeat(ledger)
    with caplog.at_level(logging.WARNING, logger="worker.heartbeat"):
        hb.beat()
        now[0] += 3.1
        hb.beat()
        assert caplog.records == []
        now[0] += 7.5
        hb.beat()
    (record,) = caplog.records
    assert record.getMessage() == (
        "heartbeat: 7.5 s since the last beat (every 3.0 s; the record lives 9.0 s)"
    )
    assert ledger.beats == [("n1", NODE_TTL_BEATS * 3.0, ("python",))] * 3
