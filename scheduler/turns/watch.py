"""Whom a waiting turn depends on, and whether that process still lives.

A turn in flight is in one of three places, and each has its watcher:

* held: a worker process reserved its message (``receive_turn``, at prefetch)
  or claimed it; the turn record names the node and its incarnation. The turn
  is lost when that node's heartbeat lapses or names another incarnation (the
  node restarted under the same name: the old process and what it held are
  gone, though the name never stopped beating).
* on a node's direct queue, not yet held: the turn is lost when that node dies
  or restarts (its direct queue had one consumer, the process that is gone).
* on a shared queue, not yet held: any process serving the type may take it.
  Only one that took the message off the queue and died before it could note
  it (a few milliseconds) leaves it nowhere; so when a process serving the
  type has gone since the turn was sent and the turn is still held by nobody
  after ``UNHELD_GRACE_S``, it is taken as lost.

This watch is the only redelivery of a turn whose process died: the broker
keeps no copy of a turn it handed out (``sandgrid.wire.broker.QoS``; a process
that stops, or reconnects, puts back what it held). Sending a turn again is
always safe for the workspace: ``requeue_turn`` is atomic with what the watcher
saw, and the old message, if it is ever delivered (put back by a process that
closed its channel), is refused by ``claim_turn`` (attempt mismatch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob
from sandgrid.wire.ledger import NodeRecord
from scheduler.registry.nodes import NodeDirectory

__all__ = ["RESTART_GRACE_S", "UNHELD_GRACE_S", "Lost", "TurnRecords", "TurnWatch"]

#: How long a turn on a shared queue may be held by nobody after one of its
#: type's processes died, before it is sent again (s).
UNHELD_GRACE_S = 1.0

#: Heartbeat records lapse while Redis is down or fails over: until it has served
#: this long (3 beats of the default heartbeat; ``SessionRegistry.uptime_s``, which
#: counts a promoted replica from its promotion), a missing record is no proof of death.
RESTART_GRACE_S = 9.0


class TurnRecords(Protocol):
    """What the watch reads of the registry (``SessionRegistry`` is one)."""

    def turn_state(self, turn_id: str) -> dict[str, str]: ...

    def node_record(self, node: str) -> NodeRecord | None: ...

    def uptime_s(self) -> float: ...


@dataclass(frozen=True)
class Lost:
    """The process a turn depended on is gone.

    Attributes:
        node: its node name (for the error and the logs).
        holder: the incarnation the turn record named ('' when none held it);
            the requeue is refused if the record names another one by then.
    """

    node: str
    holder: str = ""


class TurnWatch:
    """Watches one attempt of one turn; ``check`` on every poll of the waiter.

    Args:
        records: the registry (turn records, uncached heartbeat records).
        nodes: the cached view of the live nodes.
        job: the attempt watched.
        queue: the queue it was sent to.
        grace_s: see ``UNHELD_GRACE_S``.
        restart_grace_s: see ``RESTART_GRACE_S`` (3 heartbeats of the grid).
    """

    def __init__(
        self,
        records: TurnRecords,
        nodes: NodeDirectory,
        job: TurnJob,
        queue: str,
        *,
        grace_s: float = UNHELD_GRACE_S,
        restart_grace_s: float = RESTART_GRACE_S,
    ) -> None:
        self.records = records
        self.nodes = nodes
        self.job = job
        self.grace_s = grace_s
        self.restart_grace_s = restart_grace_s
        self.direct = names.node_of_queue(queue)
        self.direct_inc = self.nodes.incarnation(self.direct) if self.direct else None
        self.consumers = frozenset() if self.direct else nodes.incarnations(job.session.type)
        self._unheld_gone_at: float | None = None

    def check(self) -> Lost | None:
        """The lost process, or None while the turn may still be answered."""
        record = self.records.turn_state(self.job.turn_id)
        node, inc = record.get("node", ""), record.get("inc", "")
        if node:
            lost = not self.nodes.alive(node, inc)
            return Lost(node, inc) if lost and self._dead(node, inc) else None
        if self.direct:
            live = self.nodes.incarnation(self.direct)
            changed = live is None or bool(self.direct_inc and live and live != self.direct_inc)
            dead = changed and self._dead(self.direct, self.direct_inc or "")
            return Lost(self.direct) if dead else None
        return self._unheld_on_shared_queue()

    def _unheld_on_shared_queue(self) -> Lost | None:
        gone = self.consumers - self.nodes.incarnations(self.job.session.type)
        if not gone:
            return None
        now = time.monotonic()
        if self._unheld_gone_at is None:
            self._unheld_gone_at = now
        if now - self._unheld_gone_at < self.grace_s:
            return None
        return Lost(min(gone).split("/", 1)[0])

    def _dead(self, node: str, inc: str) -> bool:
        """Confirm with an uncached read: the cached view may predate a new process.

        A record that is missing because Redis restarted or failed over (it
        lapsed while Redis was away) is no verdict until a live node had time to
        beat again: the process may still be running the turn, and sending it
        again would run it twice.
        """
        record = self.records.node_record(node)
        if record is not None:
            return bool(inc and record.inc and record.inc != inc)
        return self.records.uptime_s() >= self.restart_grace_s
