"""Idempotent exec through the API: one run per key, the first result for every retry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis.exceptions

from sandgrid.errors import Conflict, ErrorCode, InfrastructureError
from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.turns.idempotency import fingerprint, turn_id_for
from tests.support.fakes import Grid

KEY = "retry-key-0001"


def _session(grid: Grid, **body: Any) -> str:
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _exec(grid: Grid, sid: str, body: dict[str, Any], key: str | None = KEY) -> Any:
    headers = grid.headers()
    if key is not None:
        headers["Idempotency-Key"] = key
    return grid.http.post(f"/v1/sessions/{sid}/exec", json=body, headers=headers)


def _execs(grid: Grid) -> list[str]:
    """The turn ids of the exec turns the worker was sent."""
    return [job.turn_id for job, _ in grid.worker.sent if isinstance(job.op, ExecOp)]


def _together(n: int, call: Callable[[], Any]) -> list[Any]:
    """Run ``call`` in ``n`` threads at once; their answers."""
    answers: list[Any] = []
    threads = [threading.Thread(target=lambda: answers.append(call())) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return answers


def test_a_retry_after_the_first_finished_returns_its_result_without_running(grid: Grid) -> None:
    sid = _session(grid)
    first = _exec(grid, sid, {"shell": "echo once >> log"})
    assert first.status_code == 200, first.text
    again = _exec(grid, sid, {"shell": "echo once >> log"})
    assert again.status_code == 200, again.text
    assert again.json()["stdout"] == first.json()["stdout"]
    assert again.json()["exit_code"] == first.json()["exit_code"]
    assert _execs(grid) == [turn_id_for("acme", sid, KEY)]  # one run, the key's turn
    assert _exec(grid, sid, {"shell": "echo once >> log"}, key=None).status_code == 200
    assert len(_execs(grid)) == 2  # no key: a new turn


def test_two_concurrent_execs_with_one_key_run_once(grid: Grid) -> None:
    sid = _session(grid)
    hold = grid.worker.hold = threading.Event()
    threading.Timer(0.5, hold.set).start()  # both requests are in: one sent, one waiting
    answers = _together(2, lambda: _exec(grid, sid, {"shell": "append"}))
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].json()["stdout"] == answers[1].json()["stdout"] == "append\n"
    assert len(_execs(grid)) == 1


def test_a_key_reused_with_another_body_is_422_naming_the_header(grid: Grid) -> None:
    sid = _session(grid)
    assert _exec(grid, sid, {"shell": "echo a"}).status_code == 200
    r = _exec(grid, sid, {"shell": "echo b"})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "idempotency_key_reused" and err["context"]["field"] == "Idempotency-Key"
    assert len(_execs(grid)) == 1


def test_a_malformed_key_is_422_naming_the_header(grid: Grid) -> None:
    sid = _session(grid)
    for bad in ("short", "x" * 129, "spaces are not allowed", "key/with/slashes"):
        r = _exec(grid, sid, {"shell": "echo"}, key=bad)
        assert r.status_code == 422, (bad, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_input" and err["context"]["field"] == "Idempotency-Key"
    assert _execs(grid) == []


def test_a_refused_turn_releases_its_key(grid: Grid) -> None:
    sid = _session(grid, quotas={"max_parallel_turns": 1})
    grid.worker.hold = threading.Event()
    t = threading.Thread(target=lambda: _exec(grid, sid, {"shell": "busy"}, key=None))
    t.start()
    while not grid.worker.sent:
        time.sleep(0.01)
    refused = _exec(grid, sid, {"shell": "later"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "session_busy"
    grid.worker.hold.set()
    t.join(10)
    ran = _exec(grid, sid, {"shell": "later"})  # the same key: it did not run, so it runs now
    assert ran.status_code == 200 and ran.json()["stdout"] == "later\n"
    assert len(_execs(grid)) == 2


def test_an_error_outcome_is_kept_under_the_key(grid: Grid) -> None:
    sid = _session(grid)
    first = _exec(grid, sid, {"argv": ["crash"]})
    assert first.status_code == 500 and first.json()["error"]["code"] == "sandbox_lost"
    again = _exec(grid, sid, {"argv": ["crash"]})
    assert again.status_code == 500 and again.json()["error"] == first.json()["error"]
    assert len(_execs(grid)) == 1


def test_the_sdk_sends_one_key_per_call(grid: Grid) -> None:
    sid = _session(grid)
    with grid.client() as c:
        c.exec(sid, shell="one")
        c.exec(sid, shell="one")  # a new call: a new key, a new run
        c.exec(sid, shell="two", idempotency_key=KEY)
        c.exec(sid, shell="two", idempotency_key=KEY)  # the caller's key: one run
    ids = _execs(grid)
    assert len(ids) == 3 and all(i.startswith("t-k") for i in ids)
    assert ids[2] == turn_id_for("acme", sid, KEY)


def test_a_key_whose_request_died_before_sending_is_taken_over_once(grid: Grid) -> None:
    sid = _session(grid)
    store = grid.services.runner.idempotency
    store.take_over_s = 0.2
    op = ExecOp(request=ExecRequest(shell="late"))
    turn_id = turn_id_for("acme", sid, KEY)
    assert store.reserve(turn_id, fingerprint(op), 60).state == "new"  # then it "died"
    answers = _together(2, lambda: _exec(grid, sid, {"shell": "late"}))
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert _execs(grid) == [turn_id]  # one of the two ran it, the other got its result


class _Silent:
    """A dispatcher whose turns never answer (their message was lost)."""

    def handle_of(self, job: Any) -> Any:
        return job

    def wait(self, handle: Any, timeout: float) -> None:
        time.sleep(min(timeout, 0.02))


def _pending(grid: Grid, claimed: bool) -> tuple[Any, Any]:
    """A keyed turn reserved and recorded (queued; ``claimed``: a worker started it)."""
    reg, store = grid.services.registry, grid.services.runner.idempotency
    sid = _session(grid)
    session = reg.get("acme", sid)
    job = TurnJob(
        turn_id=turn_id_for("acme", sid, KEY),
        session=session,
        op=ExecOp(request=ExecRequest(shell="x")),
    )
    assert store.reserve(job.turn_id, fingerprint(job.op), 30).state == "new"
    assert reg.begin_turn(sid, job.turn_id, 30)
    if claimed:
        assert reg.ledger.claim_turn(job.turn_id, "w1", 1, "inc-a")
    return job, store


def test_a_retry_that_waits_in_vain_says_the_turn_did_not_run_when_no_worker_took_it(
    grid: Grid,
) -> None:
    """22.5: a task message lost with a killed Redis primary; the retry's wait ends
    in ``turn_timeout`` that says ``ran: false`` (it was silent), and the turn is
    abandoned, so a late delivery runs nothing."""
    job, store = _pending(grid, claimed=False)
    with pytest.raises(InfrastructureError) as err:
        store.attach(_Silent(), grid.services.registry, job, 0.3, 0.05)
    assert err.value.code == "turn_timeout" and err.value.context["ran"] is False
    assert not grid.services.registry.ledger.claim_turn(job.turn_id, "w2", 1, "inc-b")


def test_a_retry_that_waits_in_vain_for_a_started_turn_does_not_say_it_did_not_run(
    grid: Grid,
) -> None:
    job, store = _pending(grid, claimed=True)
    with pytest.raises(InfrastructureError) as err:
        store.attach(_Silent(), grid.services.registry, job, 0.3, 0.05)
    assert err.value.code == "turn_timeout" and "ran" not in err.value.context


def test_a_retry_does_not_take_a_resends_lease_refusal_for_the_answer(grid: Grid) -> None:
    """22.5: while the sender decides whether the refusal of its resend stands
    (``TurnRecovery.on_refused``), a retry waiting beside it keeps waiting, and
    gets the answer the sender keeps under the key."""
    from scheduler.turns.recovery import refused_by_lease

    job, store = _pending(grid, claimed=True)
    reg = grid.services.registry
    assert reg.requeue_turn(job.turn_id, 1, "inc-a") == "requeued"
    busy = Conflict("held by node w1", code=ErrorCode.SESSION_BUSY, context={"owner": "w1"})
    refusal = TurnOutcome(turn_id=job.turn_id, node="w2", ok=False, error=busy.to_body()["error"])
    assert refused_by_lease(refusal) == "w1"
    answer = TurnOutcome(turn_id=job.turn_id, node="w1", ok=True)

    class Refusing(_Silent):
        def wait(self, handle: Any, timeout: float) -> Any:
            time.sleep(min(timeout, 0.02))
            return refusal if handle.attempt == 2 else None

    threading.Timer(0.2, lambda: store.settle(job.turn_id, fingerprint(job.op), answer)).start()
    assert store.attach(Refusing(), reg, job, 5, 0.05) == answer


def test_a_retry_that_finds_the_outcome_ends_the_turn_its_sender_could_not(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """22.5: the sender's Redis failed over as its turn answered, so it answered 503
    and its turn's end (slots, record) was never written. The keyed retry that finds
    the outcome ends the turn: the session is not held busy, and a close is not
    refused, until the slot's deadline (CI: a Sentinel failover's 409 on close)."""
    sid = _session(grid)
    reg = grid.services.registry
    finish, failed = reg.finish_turn, []

    def down_once(*args: Any, **kwargs: Any) -> None:
        if not failed:
            failed.append(args)
            raise redis.exceptions.ConnectionError("the primary was killed")
        finish(*args, **kwargs)

    monkeypatch.setattr(reg, "finish_turn", down_once)
    first = _exec(grid, sid, {"shell": "echo once >> log"})
    assert first.status_code == 503, first.text
    assert reg.session_turns(sid) == [turn_id_for("acme", sid, KEY)]  # left behind
    again = _exec(grid, sid, {"shell": "echo once >> log"})
    assert again.status_code == 200, again.text
    assert reg.session_turns(sid) == [] and reg.turns_in_flight("acme") == 0
    assert reg.turn_state(turn_id_for("acme", sid, KEY))["state"] == "done"
    assert _execs(grid) == [turn_id_for("acme", sid, KEY)]  # it ran once
    closed = grid.http.delete(f"/v1/sessions/{sid}", headers=grid.headers())
    assert closed.status_code == 200 and closed.json()["state"] == "closed", closed.text


def test_a_turn_whose_slots_cannot_be_given_back_keeps_its_own_answer(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis went away while the sender waited: the answer is the wait's 503, which
    tells the caller to retry with its key, not the give-back's connection error."""
    from sandgrid.errors import unavailable

    sid = _session(grid)
    reg = grid.services.registry

    def wait_down(handle: Any, timeout: float) -> None:
        raise unavailable(
            ErrorCode.REGISTRY_UNAVAILABLE,
            "waiting: retry with the same Idempotency-Key",
            context={"task_id": "t"},
        )

    def end_down(*args: Any) -> None:
        raise redis.exceptions.ConnectionError("the primary was killed")

    monkeypatch.setattr(grid.worker, "wait", wait_down)
    monkeypatch.setattr(reg, "end_turn", end_down)
    answer = _exec(grid, sid, {"shell": "true"})
    assert answer.status_code == 503, answer.text
    assert "retry with the same Idempotency-Key" in answer.json()["error"]["message"]
