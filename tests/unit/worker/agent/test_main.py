"""The dispatch: unknown ops, bad and oversized requests get error replies."""

from __future__ import annotations

import pytest

from worker.agent import main
from worker.agent.main import handle


def test_unknown_op_and_bad_request() -> None:
    reply = handle({"id": 3, "op": "nope"})
    assert reply["id"] == 3 and not reply["ok"] and reply["error"]["code"] == "invalid_input"
    assert handle({"id": 4, "op": "ping"})["result"]["version"] == 1
    assert handle({"op": "_too_large"})["error"]["code"] == "payload_too_large"


def test_then_is_only_a_scan_after_an_exec_and_is_refused_before_anything_runs() -> None:
    for req in (
        {"id": 5, "op": "ping", "then": {"op": "scan", "roots": ["/workspace"]}},
        {"id": 6, "op": "exec", "argv": ["true"], "then": {"op": "exec", "argv": ["true"]}},
        {"id": 7, "op": "exec", "argv": ["true"], "then": "scan"},
    ):
        reply = handle(req)
        assert not reply["ok"] and reply["error"]["code"] == "invalid_input", reply
        assert "then" in reply["error"]["message"]


def test_a_warm_ping_asks_for_the_launcher_host_and_a_plain_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22.3: only the pool's ``warm`` ping has a host started before any command."""
    asked: list[bool] = []
    monkeypatch.setattr(main.LAUNCHER, "warm", lambda: asked.append(True) or True)
    assert "launcher" not in handle({"id": 1, "op": "ping"})["result"] and asked == []
    assert handle({"id": 2, "op": "ping", "warm": True})["result"]["launcher"] is True
    assert asked == [True]


def test_a_warm_ping_spawns_one_command_before_the_session_and_a_plain_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22.3: the sandbox's first spawn (slower under gVisor) happens in the pool."""
    ran: list[object] = []
    monkeypatch.setattr(main.LAUNCHER, "warm", lambda: True)
    monkeypatch.setattr(main, "op_exec", lambda req: ran.append(req) or {"exit_code": 0})
    handle({"id": 1, "op": "ping"})
    assert ran == []
    assert handle({"id": 2, "op": "ping", "warm": True})["ok"]
    assert ran == [{**main.WARM_EXEC, "id": 2}] and main.WARM_EXEC["argv"][0] == "/bin/sh"
