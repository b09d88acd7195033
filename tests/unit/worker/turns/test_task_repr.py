"""What Celery shows of a turn on the worker: a summary, never output or arguments.

The turn task's value is stored whole (the scheduler reads it) but Celery's
``saferepr`` of it, which its success line and the ``task-succeeded`` event
carry, is the summary; its requests' ``info`` (Flower's worker pages) carry the
``argsrepr``; a malformed job is refused without quoting it; a message the node
refuses is logged by size.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from celery.utils.saferepr import saferepr
from celery.worker.consumer import consumer
from kombu import Message
from kombu.utils.json import dumps
from pydantic import ValidationError

from sandgrid.models import ExecResult, Quotas, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.celery_app import app
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from worker import main, tasks
from worker.turns.task_repr import LoggedOutcome, SafeRequest, summarize

MARK = "marker-7f3a"
NOW = datetime.now(UTC)


def _outcome(**kw: Any) -> TurnOutcome:
    result = ExecResult(exit_code=0, stdout=f"out {MARK}", stderr=MARK, duration_ms=1.0, node="w1")
    base: dict[str, Any] = {
        "turn_id": "t-1",
        "node": "w1",
        "ok": True,
        "result": result,
        "snapshot": "snap-1",
        "timings": {"worker_ms": 12.34},
    }
    return TurnOutcome(**{**base, **kw})


def test_the_value_is_stored_whole_and_shown_as_a_summary() -> None:
    outcome = _outcome()
    value = LoggedOutcome(outcome)
    stored = json.loads(dumps({"result": value}))["result"]  # what the result backend writes
    assert TurnOutcome.model_validate(stored) == outcome
    shown = saferepr(value, 1024)  # what Celery's log line and task-succeeded event carry
    assert MARK not in shown
    assert "turn=t-1 node=w1 ok result=exec" in shown and "worker_ms=12.3" in shown
    assert "snapshot=yes" in shown and "bytes)" in shown


def test_an_error_shows_its_code_never_its_message() -> None:
    error = {"code": "sandbox_error", "message": f"failed on {MARK}", "context": {"x": MARK}}
    text = summarize(_outcome(ok=False, result=None, error=error))
    assert "error=sandbox_error" in text and MARK not in text


def test_the_turn_task_uses_the_safe_request() -> None:
    assert tasks.turn.Request is SafeRequest


def test_a_request_info_carries_the_argsrepr_whatever_it_is_asked() -> None:
    sent = app.amqp.as_task_v2(
        "t-1.1",
        names.TASK_TURN,
        args=[{"stdin": MARK}],
        kwargs={"env": MARK},
        argsrepr="turn=t-1 op=exec",
        kwargsrepr="{}",
    )
    message = Message(body=b"", headers=sent.headers, content_type="application/json")
    request = SafeRequest(
        message, app=app, task=tasks.turn, decoded=True, headers=sent.headers, body=sent.body
    )
    for info in (request.info(), request.info(safe=False), request.info(safe=True)):
        assert info["args"] == "turn=t-1 op=exec" and MARK not in repr(info)


def test_a_malformed_job_is_refused_naming_fields_not_values() -> None:
    session = SessionInfo(
        id="s-1", tenant="acme", type="python", quotas=Quotas(), created_at=NOW, last_used=NOW
    )
    job = TurnJob(
        turn_id="t-1",
        session=session,
        op=ExecOp.model_validate({"kind": "exec", "request": {"shell": "ls"}}),
    )
    bad = job.model_dump(mode="json")
    bad["op"]["request"]["stdin"] = {"not": MARK}
    with pytest.raises(ValueError, match=r"op\.exec\.request\.stdin") as caught:
        tasks._job(bad)
    assert MARK not in str(caught.value)


def test_a_refused_message_is_logged_by_its_size() -> None:
    saved = consumer.dump_body
    try:
        main.hide_message_bodies()
        message = SimpleNamespace(body=json.dumps({"stdin": MARK}).encode())
        text = consumer.dump_body(message, message.body)
    finally:
        consumer.dump_body = saved
    assert MARK not in text and f"{len(message.body)} bytes" in text


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    logging.captureWarnings(False)


@pytest.mark.usefixtures("root_logging")
def test_celerys_setup_logging_gets_the_grids_json_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    main.configure_logging(loglevel=logging.INFO)
    handler = logging.getLogger().handlers[0]
    out = io.StringIO()
    monkeypatch.setattr(handler, "stream", out)
    logging.getLogger("celery.app.trace").info("Task %s succeeded", "sandgrid.turn")  # DEBUG's
    logging.getLogger("celery.app.trace").error("Task %s raised", "sandgrid.turn")
    line = json.loads(out.getvalue())  # one line: the per-turn INFO line is off by default
    assert line["logger"] == "celery.app.trace" and line["msg"] == "Task sandgrid.turn raised"


def test_a_bad_reply_is_refused_without_quoting_it() -> None:
    """A traceback of a reply that does not parse is logged: its text quotes no output."""
    bad = {"turn_id": "t-1", "node": "w1", "ok": True, "result": {"kind": "nope", "stdout": MARK}}
    with pytest.raises(ValidationError) as caught:
        TurnOutcome.model_validate(bad)
    assert MARK not in str(caught.value) and "result" in str(caught.value)
