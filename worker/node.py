"""The node: one per worker process, shared by every task thread; wiring only.

It builds what exists once per node (DESIGN: not one copy per forked child):
the backends, the warm pool, the session table, the snapshot store, the
session ledger, and the components over them (persistence, residency,
executor, heartbeat, reaper), each given the narrow collaborators it uses,
never the node itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import redis

from sandgrid.wire.catalog import CATALOG, get_type
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.redis_ledger import WORKER_OUTAGE_WAIT_S, RedisLedger
from sandgrid.wire.settings import Settings, get_settings
from worker import metrics
from worker.egress import EgressProxy, RedisBook, Resolver
from worker.egress.handler import Handler
from worker.egress.hostguard import HostGuard
from worker.egress.limits import Limits
from worker.heartbeat import Heartbeat
from worker.images import ImagePuller
from worker.ops.base import NodeParts
from worker.ops.terminal import TerminalBridge
from worker.reaper import Reaper
from worker.runtimes import runtime_for
from worker.sandboxes import SandboxManager
from worker.sandboxes.manager import INCARNATION
from worker.sessions.pool import SandboxPool, WarmPool
from worker.sessions.table import SessionTable
from worker.snapshots import SnapshotStore, open_store
from worker.turns.executor import Executor
from worker.turns.interactive import TurnControl
from worker.turns.residency import Residency
from worker.turns.snapshot_policy import Persistence

__all__ = ["Node", "get_node", "start_node", "stop_node"]

log = logging.getLogger(__name__)


class Node:
    """The per-process context of a worker node.

    Args:
        name: the node's name (its direct queue is ``node.<name>``).
        types: the sandbox types it serves.
        settings: the process settings.
        ledger: the session ledger; a ``RedisLedger`` on ``settings`` when omitted.
        store: the snapshot store; made from settings when omitted.
        backends: the sandbox manager of each runtime; the registry's runtimes when omitted.
        pool: the sandbox pool; a ``WarmPool`` over the backends when omitted.
    """

    def __init__(
        self,
        name: str,
        types: list[str],
        settings: Settings | None = None,
        ledger: SessionLedger | None = None,
        store: SnapshotStore | None = None,
        *,
        backends: Mapping[str, SandboxManager] | None = None,
        pool: SandboxPool | None = None,
    ) -> None:
        self.name = name
        #: This process (also on its containers' labels): a node restarted under
        #: the same name is a new incarnation.
        self.incarnation = INCARNATION
        self.settings = settings or get_settings()
        self.types = [get_type(t).name for t in types]
        self.ledger = ledger or RedisLedger.from_settings(
            self.settings, outage_wait_s=WORKER_OUTAGE_WAIT_S
        )
        self.store = store or open_store(self.settings)
        self.egress: EgressProxy | None = None
        if backends is None:
            self.egress = _egress_proxy(name, self.settings)
            runtimes = {CATALOG[t].runtime for t in self.types}
            puller = ImagePuller.from_settings(self.settings, name)  # 25.3: one per node
            images = puller.ensure if puller is not None else None
            backends = {
                r: SandboxManager(runtime_for(r), node=name, egress=self.egress, images=images)
                for r in runtimes
            }
        self.backends = dict(backends)
        self.sessions = SessionTable()
        targets = {t: self.settings.worker.pool_size for t in self.types}
        self.pool = pool or WarmPool(self.backend_for, targets)
        worker = self.settings.worker
        self.persistence = Persistence(self.ledger, self.store, self.backend_for, worker.snapshots)
        self.residency = Residency(name, self.ledger, self.sessions, self.pool, self.persistence)
        #: Streamed output and cancel of this node's running execs.
        self.control = TurnControl(
            redis.Redis.from_url(
                self.settings.redis_url,
                decode_responses=True,
                socket_timeout=5,  # a Redis outage must not hold a turn
                socket_connect_timeout=2,
            ),
            self.sessions,
        )
        parts = NodeParts(
            self.ledger,
            self.sessions,
            self.residency,
            self.persistence,
            self.backend_for,
            control=self.control,
            terminal=TerminalBridge.from_settings(self.settings),
        )
        self.executor = Executor(name, self.pool, parts, self.incarnation)
        self.heartbeat = Heartbeat(
            name,
            self.ledger,
            self.sessions,
            self.residency,
            self.settings.heartbeat_s,
            incarnation=self.incarnation,
            types=self.types,
        )
        self.reaper = Reaper(
            name,
            self.sessions,
            self.pool,
            list(self.backends.values()),
            self.residency,
            self.persistence,
            idle_ttl_s=worker.idle_ttl_s,
            interval_s=worker.reap_interval_s,
        )

    def backend_for(self, sandbox_type: str) -> SandboxManager:
        """The sandbox manager of a sandbox type: the one of its runtime."""
        return self.backends[CATALOG[sandbox_type].runtime]

    # ---- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Collect what a previous process of this node left, then warm up."""
        self.reaper.collect_orphans(startup=True)
        self.serve_metrics()
        self.heartbeat.start()
        self.pool.start()
        self.reaper.start()
        log.info("node %s: serving %s", self.name, ", ".join(self.types))

    def serve_metrics(self) -> None:
        """Start the node's ``/metrics`` and name its port in the heartbeat."""
        w = self.settings.worker
        self.heartbeat.metrics_port = metrics.serve(w.metrics_port, w.metrics_addr)
        if self.egress is not None:  # a grid port (23.3), known only once bound
            self.egress.handler.guard.add_port(self.heartbeat.metrics_port)
        self.heartbeat.metrics_host = metrics.advertised_host(w.metrics_addr)
        stats = getattr(self.pool, "stats", dict)
        metrics.watch_pool(
            metrics.PoolCollector(self.name, stats, lambda: len(self.pool.container_ids()))
        )

    def stop(self) -> None:
        """Drain: snapshot what needs it, release leases, destroy every container."""
        self.reaper.stop()
        for local in list(self.sessions):
            self.residency.release(local, snapshot=True)
        self.heartbeat.stop()
        self.pool.close()
        if self.egress is not None:
            self.egress.stop()
        log.info("node %s: stopped", self.name)


def _egress_proxy(name: str, settings: Settings) -> EgressProxy:
    """The node's egress proxy over the grid's Redis (docs/network.md)."""
    egress = settings.worker.egress
    book = RedisBook(settings.redis_url, max_len=egress.audit_max, ttl_s=egress.audit_ttl_s)
    handler = Handler(
        book,
        Resolver(egress.hosts),
        name,
        egress.connect_timeout_s,
        guard=HostGuard.from_settings(settings),
        limits=Limits.from_settings(egress),
    )
    return EgressProxy(handler, egress.state_dir / name)


_node: Node | None = None
_lock = threading.Lock()


def start_node(name: str, types: list[str]) -> Node:
    """Create and start this process's node (once)."""
    global _node
    with _lock:
        if _node is None:
            _node = Node(name, types)
            _node.start()
        return _node


def get_node() -> Node:
    """This process's node.

    Raises:
        RuntimeError: ``start_node`` was not called.
    """
    if _node is None:
        raise RuntimeError("the worker node is not started (start_node)")
    return _node


def stop_node() -> None:
    global _node
    with _lock:
        if _node is not None:
            _node.stop()
            _node = None
