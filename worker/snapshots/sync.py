"""The sync between a sandbox and the snapshot store: what the worker executor calls.

The sandbox side is the five calls of ``sandbox.SandboxFiles`` (served by the
in-sandbox agent, see docs/agent-protocol.md): ``scan`` (the manifest entries, hashes cached by
the agent), ``pack`` (a tar of some files, unless the scan carried them or the
host could read them: ``inlined``, ``read_direct``), ``unpack`` (a tar into the
roots), and ``read_range`` / ``write_range`` (a chunk of one large file). A
snapshot asks only for contents the store does not have; a restore fetches and
verifies everything before the first ``unpack``, or, over
``STREAM_RESTORE_BYTES``, each tar's worth just before it is sent (bounded
memory; see ``restore_sandbox``).

Payloads are cut to fit the agent's frame (46 MiB of raw bytes): ``pack`` is
asked for at most ``PACK_BATCH_BYTES`` of files at a time and ``unpack`` gets
tars of at most ``restoretars.MAX_TAR_BYTES`` (the first one clears the roots).
A file over ``LARGE_FILE_BYTES`` is in neither: it travels alone, in chunks of
``CHUNK_BYTES``, so any file within the snapshot limits fits. A restore writes
such files after the tars and before the last tar, which sets the modes of the
directories (a read-only directory can hold one).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from hashlib import sha256
from typing import TypeVar

from sandgrid.errors import ErrorCode, SandgridError, SnapshotError
from worker.snapshots.format.archive import WorkspaceChanged, read_packed
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.manifest import Manifest
from worker.snapshots.format.restoretars import MAX_TAR_BYTES, RestorePlan
from worker.snapshots.refs import SnapshotDraft, SnapshotRef
from worker.snapshots.sandbox import SandboxFiles
from worker.snapshots.store import DEFAULT_ROOTS, SnapshotStore
from worker.snapshots.transfer import STREAM_RESTORE_BYTES

__all__ = [
    "CHUNK_BYTES",
    "LARGE_FILE_BYTES",
    "PACK_BATCH_BYTES",
    "restore_sandbox",
    "snapshot_sandbox",
]

PACK_BATCH_BYTES = 32 << 20
"""Files asked of one ``pack``: its reply must fit the agent's 46 MiB payload."""
LARGE_FILE_BYTES = 16 << 20
"""Files over this never go in a ``pack`` or a restore tar, but in chunks."""
CHUNK_BYTES = 8 << 20
"""One ``read_range`` or ``write_range``: small enough that the agent's copies
of it (raw, base64, JSON) stay a small part of the sandbox's memory."""
_ATTEMPTS = 2
S = TypeVar("S")


def snapshot_sandbox(
    backend: SandboxFiles[S],
    sbx: S,
    store: SnapshotStore,
    tenant: str,
    session_id: str,
    previous: Manifest | None,
    *,
    roots: Sequence[str] = DEFAULT_ROOTS,
) -> SnapshotRef | None:
    """Snapshot the sandbox's workspace if it changed.

    Args:
        previous: the manifest the sandbox was last restored from or snapshotted
            to (``ref.manifest`` of the last snapshot); with it, an unchanged
            workspace costs one scan and no store round trip.

    Returns:
        The new snapshot (its ``manifest`` is the next ``previous``), or None
        when nothing changed since ``previous`` (or, without it, since the
        stored latest).

    Raises:
        InvalidInput: the workspace breaks a limit or has entries leaving the roots.
        SnapshotError: the sandbox's archive was refused, or files kept changing.
        InfrastructureError: ``store_unavailable``.
        SandboxError: from the backend.
    """
    for attempt in range(1, _ATTEMPTS + 1):
        t0 = time.perf_counter()
        scan = backend.scan(sbx, list(roots))
        t1 = time.perf_counter()
        draft = store.prepare(tenant, session_id, scan, previous, roots=roots)
        if draft is None:
            return None
        t2 = time.perf_counter()
        try:
            contents = _pack(backend, sbx, draft, direct=attempt == 1)
            t3 = time.perf_counter()
            ref = store.commit(draft, contents)
        except WorkspaceChanged:
            if attempt == _ATTEMPTS:
                raise
            continue
        stats = {
            **ref.stats,
            "scan_ms": (t1 - t0) * 1000,
            "prepare_ms": (t2 - t1) * 1000,
            "pack_ms": (t3 - t2) * 1000,
            "total_ms": (time.perf_counter() - t0) * 1000,
            "attempts": attempt,
        }
        return dataclasses.replace(ref, stats=stats)
    raise AssertionError("unreachable")  # pragma: no cover


def _pack(
    backend: SandboxFiles[S], sbx: S, draft: SnapshotDraft, *, direct: bool = True
) -> dict[str, bytes]:
    """The bytes of every content the store lacks: those the scan carried, then those
    read from the host (``read_direct``, unless not ``direct``: a second attempt),
    when they hash to what the store needs; the rest asked in frame-sized batches
    (and large files in chunks)."""
    contents: dict[str, bytes] = {}
    batch: dict[str, Entry] = {}
    used = 0
    needed = _taken(
        backend.inlined(sbx), sorted(draft.need.values(), key=lambda e: e.path), contents
    )
    if needed and direct:
        got = backend.read_direct(sbx, [(e.path, e.size) for e in needed])
        needed = _taken(got, needed, contents, hashed=False)
    for e in needed:
        if e.size > LARGE_FILE_BYTES:
            contents[str(e.sha256)] = _read_large(backend, sbx, e)
    small = [e for e in needed if e.size <= LARGE_FILE_BYTES]
    for i, e in enumerate(small):
        batch[e.path] = e
        used += e.size
        last = i == len(small) - 1
        if last or used + small[i + 1].size > PACK_BATCH_BYTES:
            contents.update(read_packed(backend.pack(sbx, list(batch)), batch))
            batch, used = {}, 0
    return contents


def _taken(
    got: Mapping[str, bytes],
    entries: list[Entry],
    contents: dict[str, bytes],
    *,
    hashed: bool = True,
) -> list[Entry]:
    """Put in ``contents`` the bytes ``got`` has of ``entries`` that hash to what the
    scan gave (stale or foreign bytes never do); the entries still lacking bytes.

    ``hashed=False`` checks the size alone and leaves the sha256 to the commit,
    which verifies every content it stores (``transfer.blob_bytes``): bytes read
    after the scan that changed since are ``WorkspaceChanged`` there, as the
    same file's ``pack`` would be, and the snapshot is taken again, asking the
    sandbox (``_pack(direct=False)``)."""
    lacking = []
    for e in entries:
        data = got.get(e.path)
        if (
            data is not None
            and len(data) == e.size
            and (not hashed or sha256(data).hexdigest() == e.sha256)
        ):
            contents[str(e.sha256)] = data
        else:
            lacking.append(e)
    return lacking


def _read_large(backend: SandboxFiles[S], sbx: S, e: Entry) -> bytes:
    """A file too large for ``pack``, read in chunks. A size other than the scan's,
    or a size or mtime that moves between chunks, is ``WorkspaceChanged`` (and
    ``commit`` checks the sha256 of the whole)."""
    chunks: list[bytes] = []
    first: tuple[int, int] | None = None
    offset = 0
    while offset < e.size:
        want = min(CHUNK_BYTES, e.size - offset)
        got = backend.read_range(sbx, e.path, offset, want)
        first = first or (got.size, got.mtime_ns)
        if len(got.data) != want or (got.size, got.mtime_ns) != first or got.size != e.size:
            raise WorkspaceChanged(
                f"{e.path} changed while it was being snapshotted",
                operation="snapshot",
                context={"path": e.path},
            )
        chunks.append(got.data)
        offset += want
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def restore_sandbox(
    backend: SandboxFiles[S],
    sbx: S,
    store: SnapshotStore,
    tenant: str,
    session_id: str,
    ref: SnapshotRef | str | None,
    *,
    roots: Sequence[str] = DEFAULT_ROOTS,
) -> Manifest:
    """Make the sandbox's roots exactly what a snapshot holds.

    The manifest is verified first. Up to ``STREAM_RESTORE_BYTES`` every blob is
    fetched and verified too before the sandbox is touched: a bad snapshot
    leaves it as it was. A larger snapshot is restored in parts (a tar, or a
    large file, at a time), each fetched and verified just before it is sent,
    so that memory is bounded by a part, not by the workspace.

    A part after the first can then fail once the sandbox was touched: its
    error says so with ``context["sandbox_dirty"]``. Verifying everything in a
    first pass instead would download every blob twice and still leave that
    case (the store can fail between the passes); and the executor destroys
    the sandbox of any failed restore, touched or not, so a dirty one is never
    used (see ``transfer.restore_plan``).

    Args:
        ref: the snapshot (a ref or its name), or None for the latest.
        roots: the roots a snapshot may hold; a manifest naming others is refused.

    Returns:
        The restored manifest: the ``previous`` of the next snapshot.

    Raises:
        NotFound: no such snapshot.
        SnapshotError: ``snapshot_corrupt`` when verification fails (sandbox
            untouched, unless ``context["sandbox_dirty"]`` says otherwise);
            ``snapshot_failed`` with ``context["sandbox_dirty"]`` when ``unpack``
            or ``write_range`` failed (a full workspace, say). A dirty sandbox
            may hold part of the snapshot and must be discarded.
        InfrastructureError: ``store_unavailable`` (sandbox untouched, unless
            ``context["sandbox_dirty"]`` says otherwise).
    """
    manifest = store.load(tenant, session_id, ref)
    if not set(manifest.roots) <= set(roots):
        raise SnapshotError(
            f"snapshot {manifest.name} is refused: its roots {list(manifest.roots)} "
            f"are not among {list(roots)}",
            code=ErrorCode.SNAPSHOT_CORRUPT,
            operation="snapshot.restore",
            context={"snapshot": manifest.name},
        )
    parts = store.restore_plan(
        manifest,
        max_tar_bytes=MAX_TAR_BYTES,
        large_file_bytes=LARGE_FILE_BYTES,
        stream_bytes=STREAM_RESTORE_BYTES,
    )
    roots = list(manifest.roots)
    sent = 0  # tars and files sent: the sandbox is touched from the first
    with closing(parts):
        while (plan := _next_part(parts, sent)) is not None:
            sent = _send(backend, sbx, plan, roots, sent, manifest)
            del plan  # not held while the next part downloads
    return manifest


def _next_part(parts: Iterator[RestorePlan], sent: int) -> RestorePlan | None:
    """The next part of a restore, fetched and verified; None after the last. Its
    error, once something was sent, says that the sandbox is dirty."""
    try:
        return next(parts, None)
    except SandgridError as exc:
        if not sent:
            raise
        raise type(exc)(
            f"{exc.message}; the sandbox holds part of the snapshot: discard it",
            code=exc.code,
            operation=exc.operation,
            context={**exc.context, "sandbox_dirty": True, "part": sent},
            retryable=exc.retryable,
        ) from exc


def _send(
    backend: SandboxFiles[S],
    sbx: S,
    plan: RestorePlan,
    roots: list[str],
    sent: int,
    manifest: Manifest,
) -> int:
    """Send one part of a restore (the first tar of all clears the roots); returns
    how many tars and files were sent in all, counting on from ``sent``."""
    part = sent
    try:
        for data in plan.tars:
            backend.unpack(sbx, data, roots, part == 0)
            part += 1
        for e, content in plan.large:
            _write_large(backend, sbx, e, content, roots, int(manifest.created))
            part += 1
        for data in plan.modes:
            backend.unpack(sbx, data, roots, False)
            part += 1
    except Exception as exc:
        raise SnapshotError(
            f"restoring snapshot {manifest.name} into the sandbox failed: {exc}; "
            "discard the sandbox",
            code=ErrorCode.SNAPSHOT_FAILED,
            operation="snapshot.restore",
            context={"snapshot": manifest.name, "sandbox_dirty": True, "part": part},
        ) from exc
    return part


def _write_large(
    backend: SandboxFiles[S],
    sbx: S,
    e: Entry,
    content: bytes | memoryview,
    roots: list[str],
    mtime: float,
) -> None:
    """Write a file in chunks: views of the fetched blob, never joined or copied."""
    view = memoryview(content)
    for offset in range(0, e.size, CHUNK_BYTES):
        chunk = view[offset : offset + CHUNK_BYTES]
        final = offset + len(chunk) == e.size
        size = backend.write_range(
            sbx, e.path, offset, chunk, roots, mode=e.mode & 0o777, final=final, mtime=mtime
        )
        if size != offset + len(chunk):
            raise SnapshotError(
                f"{e.path} holds {size} bytes after a write, not {offset + len(chunk)}",
                operation="snapshot.restore",
                context={"path": e.path},
            )
