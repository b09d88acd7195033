"""The node: one per worker process, shared by every task thread.

It owns what exists once per node (DESIGN: not one copy per forked child):
the backends, the warm pools, the session table, the snapshot store, the
registry connection, and the background threads (heartbeat, reaper).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sandgrid.errors import SandgridError
from sandgrid.wire.catalog import CATALOG, get_type
from sandgrid.wire.settings import Settings, get_settings
from worker.backends import backend_for
from worker.backends.base import Sandbox, SandboxBackend
from worker.executor import Executor
from worker.heartbeat import Heartbeat
from worker.persistence import Persistence
from worker.pool import WarmPool
from worker.reaper import Reaper
from worker.session_table import LocalSession, SessionTable
from worker.snapshots import SnapshotStore, open_store, restore_sandbox, snapshot_sandbox

__all__ = ["Node", "get_node", "start_node", "stop_node"]

log = logging.getLogger(__name__)


class Node:
    """The per-process context of a worker node.

    Args:
        name: the node's name (its direct queue is ``node.<name>``).
        types: the sandbox types it serves.
        settings: the process settings.
        registry: the session registry (``scheduler.registry.sessions.SessionRegistry``).
        store: the snapshot store; made from settings when omitted.
    """

    def __init__(
        self,
        name: str,
        types: list[str],
        settings: Settings | None = None,
        registry: Any = None,
        store: SnapshotStore | None = None,
    ) -> None:
        from scheduler.registry.sessions import SessionRegistry

        self.name = name
        self.settings = settings or get_settings()
        self.types = [get_type(t).name for t in types]
        self.registry = registry or SessionRegistry.from_settings(self.settings)
        self.store = store or open_store(self.settings)
        runtimes = {CATALOG[t].runtime for t in self.types}
        self.backends: dict[str, SandboxBackend] = {r: backend_for(r, node=name) for r in runtimes}
        self.sessions = SessionTable()
        targets = {t: self.settings.worker.pool_size for t in self.types}
        self.pool = WarmPool(self.backend_for, targets)
        self.persistence = Persistence(self)
        self.executor = Executor(self)
        self.heartbeat = Heartbeat(self)
        self.reaper = Reaper(self, self.settings.worker.reap_interval_s)

    def backend_for(self, sandbox_type: str) -> SandboxBackend:
        return self.backends[CATALOG[sandbox_type].runtime]

    # ---- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Collect what a previous process of this node left, then warm up."""
        self.reaper.collect_orphans(startup=True)
        self.heartbeat.start()
        self.pool.start()
        self.reaper.start()
        log.info("node %s: serving %s", self.name, ", ".join(self.types))

    def stop(self) -> None:
        """Drain: snapshot what needs it, release leases, destroy every container."""
        self.reaper.stop()
        for local in list(self.sessions):
            self.release(local, snapshot=True)
        self.heartbeat.stop()
        self.pool.close()
        log.info("node %s: stopped", self.name)

    # ---- sessions -----------------------------------------------------------------------

    def restore(self, sbx: Sandbox, tenant: str, session_id: str, ref: str) -> Any:
        """Restore snapshot ``ref`` into ``sbx``; the manifest restored."""
        backend = self.backend_for(sbx.sandbox_type)
        return restore_sandbox(backend, sbx, self.store, tenant, session_id, ref)

    def save(self, local: LocalSession) -> tuple[str, Any] | None:
        """Snapshot the session; ``(ref, manifest)``, or None when nothing changed."""
        backend = self.backend_for(local.sandbox_type)
        ref = snapshot_sandbox(
            backend, local.sandbox, self.store, local.tenant, local.session_id, local.manifest
        )
        if ref is None:
            return None
        return ref.name, ref.manifest

    def release(
        self, local: LocalSession, *, snapshot: bool, keep_on_failure: bool = False
    ) -> bool:
        """Give a session up: save it as its policy says, drop the lease, destroy.

        Args:
            snapshot: save the workspace first (see ``Persistence.on_release``).
            keep_on_failure: when that save fails, keep the session here (the
                reaper tries again later) instead of losing its changes.

        Returns:
            False when the session was kept because its snapshot failed.
        """
        if snapshot:
            try:
                self.persistence.on_release(local)
            except Exception as exc:
                if isinstance(exc, SandgridError):
                    log.warning("session %s: snapshot on release failed: %s", local.session_id, exc)
                else:
                    log.exception("session %s: snapshot on release failed", local.session_id)
                if keep_on_failure:
                    return False
        self.discard(local)
        return True

    def discard(self, local: LocalSession) -> None:
        """Forget a session here: its container is destroyed, its lease released."""
        self.sessions.pop(local.session_id)
        self.pool.discard(local.sandbox)
        try:
            self.registry.release_lease(local.session_id, self.name)
        except Exception:
            log.exception("session %s: lease release failed", local.session_id)


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
    if _node is None:
        raise RuntimeError("the worker node is not started (start_node)")
    return _node


def stop_node() -> None:
    global _node
    with _lock:
        if _node is not None:
            _node.stop()
            _node = None
