"""What the worker's logs, task events and remote-control answers show of a turn.

Celery writes a task's return value into its success log line ("Task ...
succeeded in 0.1s: <value>") and into the ``task-succeeded`` event that Flower
shows (``/api/tasks``, the task page), both as ``saferepr`` of the value; and
its remote-control answers (``inspect active``/``reserved``/``query_task``,
what Flower's worker pages show) carry each held request's arguments. A turn's
value holds the tenant's stdout, file contents and process output, its
arguments stdin, file contents and environment values: none of that may be
on display.

* ``LoggedOutcome`` is what the turn task returns: its ``repr`` is a summary
  (ids, result kind, sizes, durations, error code), and its ``__json__`` the
  ``TurnOutcome`` JSON, which kombu's encoder writes into the result backend
  unchanged, so the scheduler reads what it always read.
* ``SafeRequest`` is the turn task's request class: its ``info`` always gives
  the message's ``argsrepr`` (``scheduler.turns.task_repr``), never the
  arguments.
"""

from __future__ import annotations

from typing import Any

from celery.worker.request import Request

from sandgrid.wire.jobs import TurnOutcome

__all__ = ["LoggedOutcome", "SafeRequest", "summarize"]


def summarize(outcome: TurnOutcome) -> str:
    """``turn=t-… node=w1 ok result=exec (312 bytes) snapshot=yes worker_ms=41.2``.

    Only ids, the result's kind, sizes and durations; for an error, its code.
    """
    parts = [f"turn={outcome.turn_id}", f"node={outcome.node}"]
    if outcome.ok and outcome.result is not None:
        size = len(outcome.result.model_dump_json())
        parts.append(f"ok result={outcome.result.kind} ({size} bytes)")
    elif outcome.ok:
        parts.append("ok")
    else:
        code = (outcome.error or {}).get("code", "unknown")
        parts.append(f"error={code if isinstance(code, str) else 'unknown'}")
    parts.append(f"snapshot={'yes' if outcome.snapshot else 'no'}")
    parts += [f"{k}={v:.1f}" for k, v in sorted(outcome.timings.items())]
    return " ".join(parts)


class LoggedOutcome:
    """A turn task's return value: the outcome's JSON, shown as its summary.

    Args:
        outcome: the turn's outcome.
    """

    __slots__ = ("_body", "_summary")

    def __init__(self, outcome: TurnOutcome) -> None:
        self._body: dict[str, Any] = outcome.model_dump(mode="json")
        self._summary = summarize(outcome)

    def __json__(self) -> dict[str, Any]:
        """What kombu's JSON encoder stores: the ``TurnOutcome`` JSON."""
        return self._body

    def __repr__(self) -> str:
        return f"<outcome {self._summary}>"

    __str__ = __repr__

    def body(self) -> dict[str, Any]:
        """The ``TurnOutcome`` JSON (what the result backend holds)."""
        return self._body


class SafeRequest(Request):
    """A request whose ``info`` never carries the task's arguments, only their repr."""

    def info(self, safe: bool = False) -> Any:
        """Celery's request info with ``argsrepr``/``kwargsrepr``, whatever ``safe`` says."""
        return super().info(safe=True)
