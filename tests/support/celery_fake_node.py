"""A stand-in worker node for the scheduler's Celery tests: the real broker, no Docker.

Run as ``celery -A celery_fake_node worker`` with ``FAKE_NODE`` set. It registers
``names.TASK_TURN`` like ``worker.tasks`` does, heartbeats, claims turns, takes
leases, and answers with a ``TurnOutcome`` whose stdout names the queue that
delivered the turn, so tests can see the routing.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from celery import signals

from sandgrid.errors import ErrorCode, InfrastructureError
from sandgrid.models import ExecResult
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import get_settings

NODE = os.environ.get("FAKE_NODE", "fake")
HEARTBEAT_TTL_S = float(os.environ.get("FAKE_HEARTBEAT_TTL_S", "1.0"))

settings = get_settings()
app = make_celery(settings)
ledger = RedisLedger.from_settings(settings)


def _beat() -> None:
    while True:
        ledger.heartbeat(NODE, HEARTBEAT_TTL_S)
        time.sleep(HEARTBEAT_TTL_S / 4)


@signals.worker_ready.connect
def _start(**_: Any) -> None:
    threading.Thread(target=_beat, daemon=True).start()


@app.task(name=names.TASK_TURN, bind=True)
def turn(self: Any, job: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    j = TurnJob.model_validate(job)
    if not ledger.claim_turn(j.turn_id, NODE, j.attempt):
        err = InfrastructureError("abandoned", code=ErrorCode.WORKER_LOST)
        return TurnOutcome(turn_id=j.turn_id, node=NODE, ok=False, error=err.to_body()).model_dump(
            mode="json"
        )
    ledger.acquire_lease(j.session.id, NODE)
    queue = (self.request.delivery_info or {}).get("routing_key", "?")
    stdout = queue
    if isinstance(j.op, ExecOp) and j.op.request.shell == "hang" and j.attempt == 1:
        time.sleep(60)  # the first run hangs (its node gets killed); a re-run answers
    result = ExecResult(exit_code=0, stdout=stdout, duration_ms=0.1, node=NODE)
    ledger.record_turn(j.session.id)
    worker_ms = (time.perf_counter() - t0) * 1000
    return TurnOutcome(
        turn_id=j.turn_id,
        node=NODE,
        ok=True,
        result=result,
        timings={"worker_ms": worker_ms, "sandbox_ms": 0.1},
    ).model_dump(mode="json")
