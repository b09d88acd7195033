"""The gate of one session on this node: its turns share it, a release needs it alone.

A session runs several turns at once (``quotas.max_parallel_turns``; the
scheduler admits them), as commands in one container do. What must see the
session with no turn running takes it alone: the idle reaper's release, a
pause, a save outside a turn, a discard at close. Taking it alone waits for
the running turns to end, and turns that arrive meanwhile wait behind it, so
it is never starved.

Each turn learns whether it ran alone (``Share.solo``): the turn that started
with no other running and saw none start before its end. Only such a turn may
take the snapshot's scan with its exec (``worker.turns.snapshot_policy``);
when turns overlap, each snapshot scans the workspace when it is taken.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SessionGate", "Share"]


@dataclass
class Share:
    """One turn's hold on the gate."""

    first: bool
    """No other turn of the session was running when it started."""
    start: int
    """The gate's count of turn starts, this one's included."""


class SessionGate:
    """Shared by the session's turns, taken alone by what needs none running."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.running = 0
        self._starts = 0
        self._alone = False
        self._waiting_alone = 0

    @contextlib.contextmanager
    def turn(self) -> Iterator[Share]:
        """Hold the gate for one turn (waits while it is taken, or wanted, alone)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting_alone)
            self.running += 1
            self._starts += 1
            share = Share(first=self.running == 1, start=self._starts)
        try:
            yield share
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()

    def solo(self, share: Share) -> bool:
        """Whether the turn of ``share`` has run alone so far (none beside it, none since)."""
        with self._cond:
            return share.first and self._starts == share.start

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the gate with no turn running: wait for the running ones to end."""
        with self._cond:
            self._waiting_alone += 1
            try:
                self._cond.wait_for(lambda: not self._alone and self.running == 0)
            finally:
                self._waiting_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            self._release()

    def try_alone(self) -> bool:
        """Take the gate alone now if no turn runs (then ``release``); False if busy."""
        with self._cond:
            if self._alone or self.running:
                return False
            self._alone = True
            return True

    def release(self) -> None:
        """End a hold taken by ``try_alone``."""
        self._release()

    def _release(self) -> None:
        with self._cond:
            self._alone = False
            self._cond.notify_all()
