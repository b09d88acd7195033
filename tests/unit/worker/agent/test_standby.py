"""The standby scan child (``worker.agent.standby``): forked ahead of need, used once.

Real forks as root on this host: the child becomes uid 1000 only for its job.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from worker.agent.processes import HELPERS, tasks_besides_agent
from worker.agent.scanstate import ScanState
from worker.agent.standby import STANDBY, Standby

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="forks and drops to uid 1000")


def whoami(roots: tuple[str, ...], rows: dict[str, Any]) -> dict[str, Any]:
    return {"uid": os.getuid(), "gid": os.getgid(), "roots": list(roots), "rows": sorted(rows)}


@pytest.fixture
def standby() -> Iterator[Standby]:
    s = Standby()
    s.enabled = True
    yield s
    s.stop()


def ready(s: Standby, state: ScanState) -> None:
    """A scan was asked for once (none waiting: None), then the child is forked."""
    assert s.scan(state, ("/w",), False) is None
    s.prepare(state, whoami)
    assert s.tasks() == 1


def test_the_child_scans_as_the_user_from_its_copy_of_the_rows(standby: Standby) -> None:
    state = ScanState("t1", ("/w",), {"/w/a": ("/w/a", "file", 420, 1, "x", None)})
    ready(standby, state)
    got = standby.scan(state, ("/w",), True)
    assert got == {"uid": 1000, "gid": 1000, "roots": ["/w"], "rows": ["/w/a"]}
    assert standby.tasks() == 0  # single use
    assert standby.scan(state, ("/w",), True) is None  # none waiting until the next prepare


def test_no_child_before_a_scan_was_asked_for(standby: Standby) -> None:
    standby.prepare(ScanState(), whoami)
    assert standby.tasks() == 0


def test_a_stale_child_is_not_used(standby: Standby) -> None:
    state = ScanState("t1", ("/w",), {"/w/a": ("/w/a", "file", 420, 1, "x", None)})
    ready(standby, state)
    state.token = "t2"  # PID 1's rows moved since the fork
    assert standby.scan(state, ("/w",), True) is None


def test_a_dead_or_stopped_child_is_not_used(standby: Standby) -> None:
    state = ScanState("t1")
    ready(standby, state)
    os.kill(standby._pid or 0, signal.SIGKILL)
    assert standby.scan(state, ("/w",), False) is None
    standby.prepare(state, whoami)
    standby.stop()
    assert standby.tasks() == 0 and standby.scan(state, ("/w",), False) is None


def test_the_waiting_child_is_not_counted_as_the_users_and_a_deadline_kill_stops_it() -> None:
    assert STANDBY in HELPERS
    state = ScanState("t1")
    STANDBY.enabled = True
    try:
        ready(STANDBY, state)
        assert STANDBY.tasks() == 1
        if tasks_besides_agent() is None:  # no pids cgroup of our own on this host
            return
    finally:
        STANDBY.stop()
    assert STANDBY.tasks() == 0


def test_only_under_gvisor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGRID_RUNTIME", "runc")
    assert not Standby().enabled
    monkeypatch.setenv("SANDGRID_RUNTIME", "runsc")
    assert Standby().enabled
