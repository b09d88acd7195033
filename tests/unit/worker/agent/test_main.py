"""The dispatch: unknown ops, bad and oversized requests get error replies."""

from __future__ import annotations

from worker.agent.main import handle


def test_unknown_op_and_bad_request() -> None:
    reply = handle({"id": 3, "op": "nope"})
    assert reply["id"] == 3 and not reply["ok"] and reply["error"]["code"] == "invalid_input"
    assert handle({"id": 4, "op": "ping"})["result"]["version"] == 1
    assert handle({"op": "_too_large"})["error"]["code"] == "payload_too_large"
