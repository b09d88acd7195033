"""A session's memory: checkpointed at a pause, restored by the next turn on any node.

Pause (``pause``, under the session's gate taken alone, after the workspace
was saved): what cannot be saved is refused first with ``memory_unsavable``
(409) and the session goes on untouched (an egress connection open: a host
socket of the node); a runtime without checkpoints is refused by name (422).
Then the sandbox is checkpointed (it stops), the image packed and stored
(``worker.snapshots.memory``), the record names it (``memory_image``) and the
container is given up. A checkpoint or upload that fails leaves the workspace
snapshot as the pause's result, with the reason.

Resume (``arrive``, the first turn on whichever node): the record's image is
taken out of the record first (never restored twice, so a turn can never run
twice on one memory), fetched and verified (or taken ready from this node's
stage, when the pause had it staged here: ``worker.turns.memory_stage``) and
restored into a new container made for the session; any failure falls back to
the workspace snapshot and says so in the record (``memory_restored: false``,
``memory_reason``). docs/memory.md.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sandgrid.errors import CapacityError, Conflict, ErrorCode, InvalidInput, SandgridError
from sandgrid.lifecycle import PauseResult
from sandgrid.models import SessionInfo
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.settings import get_settings
from worker import metrics
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.table import LocalSession
from worker.snapshots.memcache import ChunkCache
from worker.snapshots.memory import MemoryMeta, MemoryStore
from worker.snapshots.memshare import SharedFiles
from worker.snapshots.memstage import StagedImages
from worker.snapshots.store import SnapshotStore

__all__ = [
    "arrive",
    "check_savable",
    "chunk_cache",
    "collect_scratch",
    "image_meta",
    "memory_store",
    "pause",
    "scratch",
    "staged_images",
    "wanted",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


_MAKING = threading.Lock()
"""The process's cache, stage and shared files are each made once, under this lock:
``functools.cache`` alone let four restores starting together make two stages, the
second emptying and making the directory the first had just made (EEXIST)."""


def memory_store(store: SnapshotStore) -> MemoryStore:
    """The memory images beside ``store``'s snapshots, with the node's size limit, its
    cache of unpacked chunks and the image files its restores share."""
    memory = get_settings().worker.memory
    cache = chunk_cache()
    with _MAKING:
        share = _shared(memory.image_dir / f"img-{os.getpid()}-shared")
    return MemoryStore(store.objects, max_bytes=memory.max_image_mb << 20, cache=cache, share=share)


def chunk_cache() -> ChunkCache | None:
    """This node process's cache of unpacked chunks (one per process: its restores
    share it), in the image scratch root under a name ``collect_scratch`` removes
    once the process is gone; None when ``cache_mb`` is 0."""
    memory = get_settings().worker.memory
    if memory.cache_mb <= 0:
        return None
    with _MAKING:
        return _cache_at(memory.image_dir / f"img-{os.getpid()}-cache", memory.cache_mb << 20)


@functools.cache
def _cache_at(root: Path, max_bytes: int) -> ChunkCache:
    return ChunkCache(root, max_bytes)


def staged_images() -> StagedImages | None:
    """This node process's images staged ahead for their resume here
    (``worker.snapshots.memstage``), or None when ``stage_mb`` is 0."""
    memory = get_settings().worker.memory
    if memory.stage_mb <= 0:
        return None
    root = memory.image_dir / f"img-{os.getpid()}-stage"
    with _MAKING:
        return _stage_at(root, memory.stage_mb << 20, memory.stage_max_age_s)


@functools.cache
def _stage_at(root: Path, max_bytes: int, max_age_s: float) -> StagedImages:
    return StagedImages(root, max_bytes, max_age_s)


@functools.cache
def _shared(root: Path) -> SharedFiles:
    """This node process's image files, shared by its restores (a fork's copies), and
    the directory that holds the files its forks offer (``SharedFiles.offer``)."""
    return SharedFiles(root)


@functools.cache
def _restore_gate(at_once: int) -> threading.BoundedSemaphore:
    """This node process's turns to run ``runsc restore`` (``restores_at_once``)."""
    return threading.BoundedSemaphore(at_once)


class _Gate:
    """A ``before_start`` that waits for the image (whole), then for the node's turn to
    restore (``restores_at_once``); how long that turn took to come."""

    def __init__(self, wait_for: Callable[[], object]) -> None:
        self.wait_for = wait_for
        self.turns = _restore_gate(get_settings().worker.memory.restores_at_once)
        self.waited_ms = 0.0
        self.held = False

    def __call__(self) -> None:
        self.wait_for()
        t0 = time.perf_counter()
        self.turns.acquire()
        self.held = True
        self.waited_ms = (time.perf_counter() - t0) * 1000

    def release(self) -> None:
        if self.held:
            self.held = False
            self.turns.release()


@contextmanager
def scratch() -> Iterator[Path]:
    """A directory for one image on this host, readable by the Docker daemon; removed after."""
    root = get_settings().worker.memory.image_dir
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"img-{os.getpid()}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def collect_scratch() -> int:
    """Remove the image directories that worker processes no longer alive left on this
    host (a node killed mid-pause or mid-restore: each can hold hundreds of MB); how
    many. The directory's name carries its process's pid (``scratch``); the nodes of
    one host share the directory, so another live node's directories stay."""
    root = get_settings().worker.memory.image_dir
    gone = 0
    for path in root.glob("img-*-*") if root.is_dir() else ():
        pid = path.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            gone += 1
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def image_meta(info_tenant: str, session_id: str, snapshot: str | None, sbx: Sandbox) -> MemoryMeta:
    """The record of an image of ``sbx`` for ``session_id`` (a fork's own id, 24.2)."""
    return MemoryMeta(
        tenant=info_tenant,
        session=session_id,
        snapshot=snapshot,
        sandbox_type=sbx.sandbox_type,
        runtime=sbx.runtime,
        lineage=(*sbx.lineage, sbx.id),
    )


def wanted(info: SessionInfo, runtime: str) -> MemoryMeta:
    """The record an image of ``info``'s session must carry to be restored for it now."""
    return MemoryMeta(
        tenant=info.tenant,
        session=info.id,
        snapshot=info.snapshot,
        sandbox_type=info.type,
        runtime=runtime,
    )


def check_savable(backend: SandboxManager, sbx: Sandbox) -> None:
    """Refuse, naming the cause, a sandbox whose memory cannot be saved; change nothing.

    Raises:
        InvalidInput: the runtime has no checkpoints (runc): 422 on ``memory``.
        Conflict: ``memory_unsavable``, an egress connection is open now.
    """
    if not backend.engine.can_checkpoint:
        raise InvalidInput(
            f"memory: the {sbx.sandbox_type} type runs on {backend.runtime}, which cannot "
            "save a sandbox's memory (only gVisor's runsc can; docs/memory.md)",
            operation="pause",
            context={"field": "memory", "runtime": backend.runtime, "rule": "gVisor types only"},
        )
    open_now = backend.egress.open_connections(sbx.name) if backend.egress else 0
    if open_now:
        raise Conflict(
            f"memory: {open_now} egress connection(s) are open, and a connection to the "
            "node's egress proxy is a host socket that cannot be saved; close them (or "
            "pause without memory) and try again",
            code=ErrorCode.MEMORY_UNSAVABLE,
            operation="pause",
            context={"cause": "egress_connection", "open": open_now},
        )


def pause(
    ledger: SessionLedger,
    store: SnapshotStore,
    backend: SandboxManager,
    local: LocalSession,
    stored_as: Callable[[str], None] = lambda sha256: None,
) -> PauseResult:
    """Checkpoint ``local``'s sandbox and store the image (the caller holds the gate
    alone, has saved the workspace and gives the sandbox up after, whatever happens);
    ``stored_as`` is told the image's name once the record names it."""
    sbx, sid = local.sandbox, local.session_id
    check_savable(backend, sbx)
    try:
        with scratch() as image:
            t0 = time.perf_counter()
            backend.engine.checkpoint(sbx.id, image)
            sbx.state = "lost"  # it stopped: nothing may use its channel again
            t1 = time.perf_counter()
            stored = memory_store(store).put(
                image, image_meta(local.tenant, sid, local.snapshot, sbx)
            )
            t2 = time.perf_counter()
    except SandgridError as exc:
        log.warning("session %s: memory not saved: %s", sid, exc)
        return PauseResult(
            session=sid, snapshot=local.snapshot, released=True, memory_reason=str(exc)
        )
    ledger.update(
        sid,
        memory_image=stored.sha256,
        memory_staged_on=None,
        memory_restored=None,
        memory_reason=None,
    )
    stored_as(stored.sha256)
    return PauseResult(
        session=sid,
        snapshot=local.snapshot,
        released=True,
        memory=True,
        memory_bytes=stored.stored_bytes,
        memory_raw_bytes=stored.raw_bytes,
        memory_new_bytes=stored.new_bytes,
        memory_ms={"checkpoint_ms": (t1 - t0) * 1000, "store_ms": (t2 - t1) * 1000},
    )


def arrive(
    ledger: SessionLedger, store: SnapshotStore, backend: SandboxManager, info: SessionInfo
) -> LocalSession | None:
    """The session restored from its memory image into a new container, or None (then
    the record says why and the caller restores the workspace snapshot as always)."""
    sha = info.memory_image
    if sha is None:
        return None
    ledger.update(info.id, memory_image=None, memory_staged_on=None)  # taken: never twice
    images = memory_store(store)
    with ThreadPoolExecutor(1, thread_name_prefix="memload") as aside:
        # The workspace manifest (the next snapshot's base) is read while the image
        # is fetched and restored: off the resume's path, and the same as before.
        snap = info.snapshot
        manifest = aside.submit(store.load, info.tenant, info.id, snap) if snap else None
        try:
            sbx = _restore(images, backend, info, sha)
        except SandgridError as exc:
            log.warning("session %s: memory image not restored: %s", info.id, exc)
            ledger.update(info.id, memory_restored=False, memory_reason=str(exc))
            return None
        finally:
            images.discard(info.tenant, info.id, sha)
        local = LocalSession.serving(info, sbx)
        local.snapshot = info.snapshot
        try:
            local.manifest = manifest.result() if manifest is not None else None
            ledger.update(info.id, memory_restored=True, memory_reason=None)
        except BaseException:
            backend.destroy(sbx)
            raise
    return local


def _timed(work: Callable[..., T], *args: object) -> tuple[float, T]:
    """``work(*args)`` and how long it took, in ms."""
    t0 = time.perf_counter()
    out = work(*args)
    return (time.perf_counter() - t0) * 1000, out


def _obtain(
    images: MemoryStore, want: MemoryMeta, sha: str, dest: Path
) -> tuple[MemoryMeta, int, bool]:
    """Image ``sha`` of ``want``'s session in ``dest``: taken from this node's stage
    when it was staged here (``memstage``), else fetched; its record, how many chunks
    came from the store, whether it was staged."""
    stage = staged_images()
    meta = stage.take(want, sha, dest) if stage is not None else None
    if meta is not None:
        metrics.MEMORY_RESUMES.labels(source="staged").inc()
        return meta, 0, True
    fetched = images.fetch_counted(want, sha, dest)
    metrics.MEMORY_RESUMES.labels(source="store").inc()
    return (*fetched, False)


def _create_restoring(
    backend: SandboxManager, info: SessionInfo, image: Path, gate: _Gate
) -> Sandbox:
    """The restored sandbox. An image saved when the engine still set up its own
    empty network (before docs/decisions.md, "A sandbox with no network has
    Docker's networking disabled") is refused by runsc in the new layout, its
    mounts differing: it is restored once more in the layout it was saved in."""
    made = functools.partial(
        backend.create,
        info.type,
        info.quotas,
        session_id=info.id,
        tenant=info.tenant,
        restore_image=image,
    )
    try:
        return made(before_start=gate)
    except CapacityError as exc:
        if not backend.engine.refused_layout(exc) or not gate.held:
            raise
        log.info("session %s: memory image saved in the engine's network layout", info.id)
        return made(engine_network=True)  # the image is whole and the node's turn held


def _restore(images: MemoryStore, backend: SandboxManager, info: SessionInfo, sha: str) -> Sandbox:
    if not backend.engine.can_checkpoint:
        raise InvalidInput(f"the {backend.runtime} runtime cannot restore memory")
    want = wanted(info, backend.runtime)
    t0 = time.perf_counter()
    with scratch() as image, ThreadPoolExecutor(1, thread_name_prefix="memfetch") as aside:
        # The container is made while its image is fetched; it starts (runsc restore)
        # once the image is whole and the node's restores allow (24.4): the create no
        # longer waits behind the fetch, nor the fetch behind another restore.
        fetching = aside.submit(_timed, _obtain, images, want, sha, image)
        gate = _Gate(fetching.result)  # fetched first: the image is ready at its turn
        try:
            sbx = _create_restoring(backend, info, image, gate)
        finally:
            gate.release()
        t1 = time.perf_counter()
    fetch_ms, (meta, fetched, staged) = fetching.result()
    cache = dict(images.cache.stats) if isinstance(images.cache, ChunkCache) else None
    log.info(  # where a resume's time goes (24.4): fetch + verify + unpack, then runsc restore
        "session %s: memory image fetched in %.0f ms (%d chunks from the store; staged here: "
        "%s; node cache: %s), restored in %.0f ms (create %.0f ms beside the fetch, waited "
        "%.0f ms for the node's restores, start %.0f ms, first ping %.0f ms)",
        info.id,
        fetch_ms,
        fetched,
        staged,
        cache,
        (t1 - t0) * 1000 - fetch_ms - gate.waited_ms,
        sbx.timings.get("create_ms", 0.0),
        gate.waited_ms,
        sbx.timings.get("start_ms", 0.0),
        sbx.timings.get("ping_ms", 0.0),
    )
    sbx.state, sbx.lineage = "leased", meta.lineage
    return sbx
