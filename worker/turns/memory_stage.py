"""Stage a paused session's memory image ahead, on another node (24.1, resume speed).

A pause with memory (``pause`` here: the explicit one and the reaper's idle one
both go through it) stores the image (``worker.turns.memory.pause``), then
``offer`` asks one other live node serving the session's type to stage it
(``sandgrid.memory_stage`` on that node's direct queue; best effort: a pause
never fails for it). That node's ``stage`` checks the record still names the
image (no resume took it), fetches and verifies the image as a resume
would, into ready files (``worker.snapshots.memstage``), and names itself in the
record (``memory_staged_on``). While it lives the scheduler routes the session's
next turn there (``scheduler.turns.routing``), and the restore takes the files
instead of fetching them. The image in the store is untouched: any other node
still resumes from it, and a stage that is lost (the node died, the entry aged
out) only costs the fetch it would have saved.

The peer is another node, not the pausing one: the image is then ready on a
second machine, which is where a resume after the pausing node's loss or drain
lands (docs/memory.md).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Mapping
from functools import partial

from sandgrid.errors import NotFound
from sandgrid.lifecycle import PauseResult
from sandgrid.wire import names
from sandgrid.wire.celery_app import app
from sandgrid.wire.ledger import NodeRecord, SessionLedger
from worker import metrics
from worker.ops.base import NodeParts
from worker.sandboxes import SandboxManager
from worker.sessions.table import LocalSession
from worker.snapshots.memstage import StagedImages
from worker.snapshots.store import SnapshotStore
from worker.turns import memory
from worker.turns.memory import memory_store, staged_images, wanted

__all__ = ["STAGE_EXPIRES_S", "offer", "pause", "pick_peer", "stage"]

log = logging.getLogger(__name__)

STAGE_EXPIRES_S = 60.0
"""A stage request not taken by then is dropped by Celery (its node is gone or busy)."""


def pick_peer(
    records: Mapping[str, NodeRecord], me: str, sandbox_type: str, session_id: str
) -> str | None:
    """The live node, not ``me``, that stages ``session_id``'s image: one of those
    serving ``sandbox_type``, spread over them by the session's id (pure)."""
    peers = sorted(
        n for n, r in records.items() if n != me and (r.types is None or sandbox_type in r.types)
    )
    if not peers:
        return None
    return peers[zlib.crc32(session_id.encode()) % len(peers)]


def pause(
    node: str,
    ledger: SessionLedger,
    store: SnapshotStore,
    backend: SandboxManager,
    local: LocalSession,
) -> PauseResult:
    """``memory.pause`` on ``node``, then ``offer``: every pause with memory (an
    explicit one, an idle one) has its image staged ahead on a peer."""
    stage_it = partial(offer, ledger, node, local.sandbox_type, local.session_id)
    return memory.pause(ledger, store, backend, local, stored_as=stage_it)


def offer(ledger: SessionLedger, node: str, sandbox_type: str, session_id: str, sha: str) -> None:
    """Ask a peer of ``node`` to stage image ``sha`` of the paused ``session_id``
    (best effort: a failure is logged, the resume then fetches as before)."""
    try:
        peer = pick_peer(ledger.node_records(), node, sandbox_type, session_id)
        if peer is None:
            return
        app.send_task(
            names.TASK_STAGE,
            args=[session_id, sha],
            queue=names.node_queue(peer),
            expires=STAGE_EXPIRES_S,
        )
    except Exception as exc:
        log.warning("session %s: memory image not offered for staging: %s", session_id, exc)


def stage(node: str, parts: NodeParts, session_id: str, sha: str) -> str:
    """Stage image ``sha`` of ``session_id`` on this node; what happened, in a word
    (the task's result and ``sandgrid_worker_memory_stages``' label; never the
    image's contents)."""
    try:
        result = _stage(node, parts, session_id, sha)
    except Exception as exc:  # the registry or the store failed: the resume fetches
        log.warning("session %s: memory image not staged: %s", session_id, exc)
        result = "failed"
    metrics.MEMORY_STAGES.labels(result=result).inc()
    return result


def _stage(node: str, parts: NodeParts, session_id: str, sha: str) -> str:
    staged = staged_images()
    if staged is None:
        return "off"
    if staged.busy:
        return "busy"
    _prune(staged, parts.ledger)
    info = parts.ledger.get_any(session_id)
    if info is None or info.memory_image != sha:  # resumed already (the lease may still be
        return "moved"  # the pausing node's: its turn ends after the offer)
    backend = parts.backend_for(info.type)
    if not backend.engine.can_checkpoint:
        return "unsupported"
    want = wanted(info, backend.runtime)
    images = memory_store(parts.persistence.store)
    t0 = time.perf_counter()
    if not staged.stage(want, sha, lambda dest: images.fetch(want, sha, dest)):
        return "not_kept"  # another began staging meanwhile, or it is larger than the bound
    try:
        parts.ledger.update(session_id, memory_staged_on=node)
        now = parts.ledger.get_any(session_id)
    except NotFound:  # closed and forgotten meanwhile
        now = None
    if now is None or now.memory_image != sha:  # resumed elsewhere meanwhile: not wanted
        staged.drop(info.tenant, session_id, sha)
        return "moved"
    took_ms = (time.perf_counter() - t0) * 1000
    log.info("session %s: memory image staged here for its resume in %.0f ms", session_id, took_ms)
    return "staged"


def _prune(staged: StagedImages, ledger: SessionLedger) -> None:
    """Drop the staged images that no record names any more (the session closed, or
    resumed elsewhere): before a new one is staged, so they never wait for their age."""
    for tenant, session_id, sha in staged.staged():
        info = ledger.get_any(session_id)
        if info is None or info.tenant != tenant or info.memory_image != sha:
            staged.drop(tenant, session_id, sha)
