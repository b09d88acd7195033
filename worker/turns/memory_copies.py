"""Copies of a session's memory: forks (24.2) and checkpoints with memory (24.3).

Both checkpoint the running sandbox once with ``--leave-running`` (the source
goes on serving) and store the image's chunks once (``MemoryStore.put_many``):

- a fork gives each new session its own copy of the workspace (the snapshot
  store's fork: manifests copied, blobs shared) and its own memory manifest,
  whose record names that session and that copy; the fork's first turn, on
  whichever node takes it, restores it (``worker.turns.memory.arrive``), once;
- a checkpoint with memory keeps one image of the session beside the named
  workspace checkpoint (``t/<tenant>/memckpt/<session>/<name>`` names it); a
  restore of the checkpoint gives the session a fresh manifest over the same
  chunks (the checkpoint's own is never consumed, so it restores again).

A source that holds no sandbox but was paused with memory is copied from its
image (``MemoryStore.clone``: nothing is checkpointed or uploaded). Anything
that fails to save memory leaves the workspace copies, with the reason.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from sandgrid.errors import NotFound, SandgridError
from sandgrid.models import SessionInfo
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.objects import keys
from worker.sandboxes import SandboxManager
from worker.sessions.table import LocalSession
from worker.snapshots.memory import MemoryMeta, StoredImage
from worker.snapshots.store import SnapshotStore
from worker.turns.memory import check_savable, image_meta, memory_store, scratch

__all__ = [
    "Saved",
    "checkpoint_memory",
    "drop_checkpoint_memory",
    "fork_memory",
    "fork_snapshots",
    "restore_memory",
]

log = logging.getLogger(__name__)


@dataclass
class Saved:
    """The images one checkpoint gave (per session), or why there are none."""

    images: dict[str, StoredImage] = field(default_factory=dict)
    reason: str | None = None
    ms: dict[str, float] = field(default_factory=dict)


def _checkpoint_once(
    store: SnapshotStore, backend: SandboxManager, local: LocalSession, metas: list[MemoryMeta]
) -> Saved:
    """Checkpoint ``local``'s sandbox leaving it running; one manifest per record."""
    sbx = local.sandbox
    check_savable(backend, sbx)
    try:
        with scratch() as image:
            t0 = time.perf_counter()
            backend.engine.checkpoint(sbx.id, image, leave_running=True)
            t1 = time.perf_counter()
            stored = memory_store(store).put_many(image, metas)
            t2 = time.perf_counter()
    except SandgridError as exc:
        log.warning("session %s: memory not copied: %s", local.session_id, exc)
        return Saved(reason=str(exc))
    ms = {"checkpoint_ms": (t1 - t0) * 1000, "store_ms": (t2 - t1) * 1000}
    return Saved({m.session: s for m, s in zip(metas, stored, strict=True)}, ms=ms)


def _source_meta(info: SessionInfo, backend: SandboxManager, snapshot: str | None) -> MemoryMeta:
    return MemoryMeta(info.tenant, info.id, snapshot, info.type, backend.runtime)


def fork_memory(
    ledger: SessionLedger,
    store: SnapshotStore,
    backend: SandboxManager,
    info: SessionInfo,
    local: LocalSession | None,
    snapshots: dict[str, str | None],
) -> Saved:
    """Give each fork of ``snapshots`` (its id -> its workspace copy) a memory image
    of the source: from its running sandbox (``local``, the caller holds its gate
    alone) or, when it holds none, from the image its pause with memory saved."""
    if local is not None:
        metas = [
            image_meta(info.tenant, sid, snap, local.sandbox) for sid, snap in snapshots.items()
        ]
        saved = _checkpoint_once(store, backend, local, metas)
    else:
        current = ledger.get_any(info.id) or info
        if current.memory_image is None:
            return Saved(reason="no sandbox is held and no memory image was saved: nothing runs")
        saved = Saved()
        want = _source_meta(current, backend, current.snapshot)
        try:
            for sid, snap in snapshots.items():
                to = MemoryMeta(info.tenant, sid, snap, info.type, backend.runtime)
                saved.images[sid] = memory_store(store).clone(want, current.memory_image, to)
        except SandgridError as exc:
            return Saved(reason=str(exc))
    for sid, stored in saved.images.items():
        ledger.update(sid, memory_image=stored.sha256, memory_restored=None, memory_reason=None)
    return saved


def checkpoint_memory(
    store: SnapshotStore, backend: SandboxManager, local: LocalSession, name: str, snapshot: str
) -> Saved:
    """Keep an image of ``local``'s running sandbox with checkpoint ``name`` (whose
    workspace is ``snapshot``); the sandbox goes on."""
    meta = image_meta(local.tenant, local.session_id, snapshot, local.sandbox)
    saved = _checkpoint_once(store, backend, local, [meta])
    if saved.images:
        stored = saved.images[local.session_id]
        record = {"image": stored.sha256, "snapshot": snapshot}
        key = keys.memory_checkpoint_key(local.tenant, local.session_id, name)
        store.objects.put(key, json.dumps(record).encode())
    return saved


def restore_memory(
    ledger: SessionLedger,
    store: SnapshotStore,
    backend: SandboxManager,
    info: SessionInfo,
    name: str,
    snapshot: str,
) -> str | None:
    """After a restore of checkpoint ``name`` made ``snapshot`` the session's latest:
    the session's next turn restores the checkpoint's memory too, when it kept some.
    Returns why not, when it kept some and it cannot (the workspace alone comes back)."""
    key = keys.memory_checkpoint_key(info.tenant, info.id, name)
    try:
        record = json.loads(store.objects.get(key))
    except KeyError:
        return None
    want = _source_meta(info, backend, str(record["snapshot"]))
    to = _source_meta(info, backend, snapshot)
    try:
        stored = memory_store(store).clone(want, str(record["image"]), to)
    except SandgridError as exc:
        ledger.update(info.id, memory_restored=False, memory_reason=str(exc))
        return str(exc)
    ledger.update(info.id, memory_image=stored.sha256, memory_restored=None, memory_reason=None)
    return None


def drop_checkpoint_memory(store: SnapshotStore, tenant: str, session_id: str, name: str) -> None:
    """Forget checkpoint ``name``'s memory (its manifest; the chunks go at the sweep)."""
    key = keys.memory_checkpoint_key(tenant, session_id, name)
    try:
        record = json.loads(store.objects.get(key))
    except (KeyError, ValueError):
        return
    image = str(record.get("image", "")) if isinstance(record, dict) else ""
    if keys.SHA256_RE.fullmatch(image):
        memory_store(store).discard(tenant, session_id, image)
    store.objects.delete(key)


def fork_snapshots(
    store: SnapshotStore, tenant: str, source: str, targets: list[str]
) -> dict[str, str | None]:
    """Each target's copy of the source's latest workspace snapshot (None: it has none)."""
    out: dict[str, str | None] = {}
    for target in targets:
        try:
            out[target] = store.fork(tenant, source, target).name
        except NotFound:
            out[target] = None
    return out
