"""The turns this process ran lately, by turn id, with the outcome it gave.

The API sends a turn again (attempt + 1) when it takes the worker holding it for
dead. A worker that only looked dead (its heartbeat lapsed while Redis
restarted) may still run or have run the first attempt; when the second comes
back to the same process (the session is live here, so it is routed here), the
executor answers with the first attempt's outcome instead of running the
command a second time on the same workspace.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sandgrid.wire.jobs import TurnOutcome

__all__ = ["RAN_KEPT", "RanTurns"]

#: Outcomes kept: far more than the turns a node runs while the API decides.
RAN_KEPT = 1024


class RanTurns:
    """A bounded, thread-safe map of turn id -> the outcome of the attempt that ran."""

    def __init__(self, kept: int = RAN_KEPT) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        self._outcomes: OrderedDict[str, TurnOutcome] = OrderedDict()

    def get(self, turn_id: str) -> TurnOutcome | None:
        with self._lock:
            return self._outcomes.get(turn_id)

    def put(self, outcome: TurnOutcome) -> None:
        """Keep ``outcome``; the oldest goes past ``kept``."""
        with self._lock:
            self._outcomes[outcome.turn_id] = outcome
            self._outcomes.move_to_end(outcome.turn_id)
            while len(self._outcomes) > self.kept:
                self._outcomes.popitem(last=False)
