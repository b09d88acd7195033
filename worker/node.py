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
from collections.abc import Callable, Mapping

from sandgrid.models import Quotas
from sandgrid.sandbox_types import SandboxTypeSpec, effective_quotas
from sandgrid.wire import catalog
from sandgrid.wire.catalog import CatalogView, get_type
from sandgrid.wire.celery_app import worker_queues
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.redis_ledger import WORKER_OUTAGE_WAIT_S, RedisLedger
from sandgrid.wire.settings import Settings, get_settings
from worker import metrics
from worker.egress import EgressProxy
from worker.heartbeat import Heartbeat
from worker.images import ImagePuller
from worker.node_services import catalog_view, egress_proxy, port_server, turn_control
from worker.ops.base import NodeParts
from worker.ops.terminal import TerminalBridge
from worker.ports.sockets import InboundSockets
from worker.reaper import Reaper
from worker.runtimes import runtime_for
from worker.sandboxes import SandboxManager
from worker.sandboxes.manager import INCARNATION
from worker.serving import QueueControl, TypeWatch, can_serve
from worker.serving.watch import is_pattern, selected
from worker.sessions.pool import WarmPool
from worker.sessions.pool_protocol import SandboxPool
from worker.sessions.table import SessionTable
from worker.snapshots import SnapshotStore, open_store
from worker.turns import memory
from worker.turns.executor import Executor
from worker.turns.residency import Residency
from worker.turns.snapshot_policy import Persistence

__all__ = ["Node", "get_node", "start_node", "stop_node"]

log = logging.getLogger(__name__)


class Node:
    """The per-process context of a worker node.

    Args:
        name: the node's name (its direct queue is ``node.<name>``).
        types: the sandbox types it serves: names, or patterns (``python-*``, ``*``)
            that also select types added to the catalog later (``worker.serving``).
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
        #: The ``--types`` entries: a name not in the catalog yet (the API seeds the
        #: types file when it starts, maybe after this node) is served once it is
        #: there, as a pattern that matches none yet is.
        self.selector = _selector(name, types)
        self.types = selected(self.selector, catalog.current())
        self.ledger = ledger or RedisLedger.from_settings(
            self.settings, outage_wait_s=WORKER_OUTAGE_WAIT_S
        )
        self.store = store or open_store(self.settings)
        self.egress: EgressProxy | None = None
        self.inbound: InboundSockets | None = None
        self._images: Callable[[str, str | None], str] | None = None
        self._own_backends = backends is None
        if backends is None:
            self.egress = egress_proxy(name, self.settings)
            self.inbound = InboundSockets()
            puller = ImagePuller.from_settings(self.settings, name)  # 25.3: one per node
            self._images = puller.ensure if puller is not None else None
            runtimes = {get_type(t).runtime for t in self.types}
            backends = {r: self._new_backend(r) for r in runtimes}
        self.backends = dict(backends)
        #: The definition each served type was started with (``worker.serving.watch``).
        self.specs: dict[str, SandboxTypeSpec] = {t: get_type(t) for t in self.types}
        #: The consumer's queues, changed at runtime; the watch is made by ``start_node``.
        self.queues = QueueControl()
        self.watch: TypeWatch | None = None
        self._serving_lock = threading.Lock()
        self.sessions = SessionTable()
        self.pool = pool or self._warm_pool()
        self._wire_components(name)

    def _warm_pool(self) -> WarmPool:
        """The warm pool of every served type, sized by demand up to its ceiling (22.3)."""
        targets = {t: self._pool_size(self.specs[t]) for t in self.types}
        warm_quotas = {t: self._warm_quotas(s) for t, s in self.specs.items() if s.quotas}
        return WarmPool(
            self.backend_for,
            targets,
            quotas=warm_quotas,
            ceiling=self.settings.worker.pool_max,  # demand's ceiling per type (22.3)
            ceilings={t: self._pool_max(s) for t, s in self.specs.items()},
            total=self.settings.worker.pool_total,
        )

    def _wire_components(self, name: str) -> None:
        """The components over the node's parts, each given the collaborators it uses."""
        worker = self.settings.worker
        self.persistence = Persistence(self.ledger, self.store, self.backend_for, worker.snapshots)
        self.residency = Residency(name, self.ledger, self.sessions, self.pool, self.persistence)
        #: Streamed output and cancel of this node's running execs.
        self.control = turn_control(self.settings, self.sessions)
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
        self.ports = port_server(name, self.settings, self.sessions, self.inbound)
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
            self.all_backends,
            self.residency,
            self.persistence,
            idle_ttl_s=worker.idle_ttl_s,
            interval_s=worker.reap_interval_s,
        )

    def all_backends(self) -> list[SandboxManager]:
        """Every backend the node has now; one made later (a runtime first served at
        runtime) is in the next answer, so the reaper lists its containers too."""
        with self._serving_lock:
            return list(self.backends.values())

    def backend_for(self, sandbox_type: str) -> SandboxManager:
        """The sandbox manager of a sandbox type: the one of its runtime."""
        known = self.specs.get(sandbox_type) or get_type(sandbox_type)
        return self._backend(known.runtime)

    def _backend(self, runtime: str) -> SandboxManager:
        """The manager of ``runtime``, made on first use when the node makes its own."""
        if runtime not in self.backends and self._own_backends:
            with self._serving_lock:
                if runtime not in self.backends:
                    self.backends[runtime] = self._new_backend(runtime)
        return self.backends[runtime]

    def _new_backend(self, runtime: str) -> SandboxManager:
        return SandboxManager(
            runtime_for(runtime),
            node=self.name,
            egress=self.egress,
            inbound=self.inbound,
            images=self._images,
        )

    def _pool_size(self, spec: SandboxTypeSpec) -> int:
        return self.settings.worker.pool_size if spec.pool_size is None else spec.pool_size

    def _pool_max(self, spec: SandboxTypeSpec) -> int:
        return self.settings.worker.pool_max if spec.pool_max is None else spec.pool_max

    @staticmethod
    def _warm_quotas(spec: SandboxTypeSpec) -> Quotas:
        """What a session of the type asking for nothing gets: its warm pool's quotas."""
        return effective_quotas(spec, Quotas())

    # ---- the types it serves, at runtime (25.1) ------------------------------------

    def can_serve(self, spec: SandboxTypeSpec) -> str | None:
        """Why the node cannot serve ``spec`` now (``worker.serving.ability``), or None."""
        try:
            backend = self._backend(spec.runtime)
        except (KeyError, ValueError) as exc:
            return f"no backend for runtime {spec.runtime} ({exc})"
        return can_serve(backend, spec)

    def serving(self) -> dict[str, SandboxTypeSpec]:
        """The types served now, each with the definition it was started with."""
        with self._serving_lock:
            return dict(self.specs)

    def start_serving(self, spec: SandboxTypeSpec) -> None:
        """Serve a type: its warm pool, its queues, then the heartbeat names it.

        A type served already takes its new definition in place; its warm
        sandboxes are made again only if they no longer fit it (another image
        tag, runtime or default quotas).
        """
        with self._serving_lock:
            old = self.specs.get(spec.name)
            self.specs[spec.name] = spec
            if spec.name not in self.types:
                self.types.append(spec.name)
        set_target = getattr(self.pool, "set_target", None)
        if set_target is not None:
            quotas = self._warm_quotas(spec)
            if old is not None and (old.image, old.runtime, old.quotas) != (
                spec.image,
                spec.runtime,
                spec.quotas,
            ):
                set_target(spec.name, 0)  # the warm ones are of the old definition
            set_target(spec.name, self._pool_size(spec), quotas, ceiling=self._pool_max(spec))
        self.queues.consume(worker_queues([spec.name], self.name)[1:])
        self.heartbeat.types = tuple(self.types)

    def stop_serving(self, name: str) -> None:
        """Stop serving a type: the heartbeat drops it, its queues stop, its pool drains.

        Its sessions live here keep their sandboxes (their turns come on the
        node's direct queue); the catalog refuses to remove a type in use.
        """
        with self._serving_lock:
            self.specs.pop(name, None)
            self.types = [t for t in self.types if t != name]
        self.heartbeat.types = tuple(self.types)
        self.queues.cancel(worker_queues([name], self.name)[1:])
        set_target = getattr(self.pool, "set_target", None)
        if set_target is not None:
            set_target(name, 0)

    def watch_catalog(self, view: CatalogView) -> TypeWatch:
        """Follow the catalog from now on (``start_node``; tests start it themselves)."""
        self.watch = TypeWatch(
            self.selector,
            view,
            serving=self.serving,
            check=self.can_serve,
            start=self.start_serving,
            stop=self.stop_serving,
            interval_s=self.settings.types_poll_s,
        )
        return self.watch

    # ---- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Collect what a previous process of this node left, then warm up."""
        self.reaper.collect_orphans(startup=True)
        memory.collect_scratch()  # 24.5: image directories of killed workers
        self.serve_metrics()
        if self.watch is not None:  # what it can serve, before its first beat names it
            self.watch.sync()
        self.serve_ports()
        self.heartbeat.start()
        self.pool.start()
        self.reaper.start()
        if self.watch is not None:
            self.watch.start()
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

    def serve_ports(self) -> None:
        """Start the port listener (issue 21.1) and name it in the heartbeat."""
        if self.ports is None:
            return
        p = self.settings.ports
        port = self.ports.serve(p.listen_addr, p.listen_port)
        self.heartbeat.ports_addr = f"{metrics.advertised_host(p.listen_addr)}:{port}"
        if self.egress is not None:  # a grid port: the sandbox may not reach it by egress
            self.egress.handler.guard.add_port(port)

    def stop(self) -> None:
        """Drain: snapshot what needs it, release leases, destroy every container."""
        if self.watch is not None:
            self.watch.stop()
        self.reaper.stop()
        for local in list(self.sessions):
            self.residency.release(local, snapshot=True)
        self.heartbeat.stop()
        self.pool.close()
        if self.ports is not None:
            self.ports.stop()
        if self.inbound is not None:
            self.inbound.stop()
        if self.egress is not None:
            self.egress.stop()
        log.info("node %s: stopped", self.name)


_node: Node | None = None
_lock = threading.Lock()


def start_node(name: str, types: list[str]) -> Node:
    """Create and start this process's node (once)."""
    global _node
    with _lock:
        if _node is None:
            view = catalog_view(get_settings())  # before the node reads the catalog
            _node = Node(name, types)
            _node.watch_catalog(view)
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


def _selector(node: str, types: list[str]) -> list[str]:
    """The ``--types`` entries, each name not in the catalog now logged (a typo shows)."""
    known = catalog.current()
    for t in types:
        if not is_pattern(t) and t not in known:
            log.warning(
                "node %s: type %r is not in the catalog yet; served once it is added", node, t
            )
    return list(types)
