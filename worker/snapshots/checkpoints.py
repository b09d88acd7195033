"""Named checkpoints of a session in the snapshot store (part of ``SnapshotStore``'s algorithm).

A checkpoint ``name`` of session ``S`` is a copy of one of ``S``'s manifests
kept as the one snapshot of a hidden session ``S.ck.name`` (``checkpoint_id``):
its own pointer retains it, so retention of ``S`` never drops it and ``gc``
keeps its blobs (it reads every pointer); no registry record names the hidden
session, so the collection of closed sessions never deletes it. It goes when
it is deleted, or when ``S`` is closed (``drop_all``). Blobs are shared, never
copied, as in a fork.

Restoring copies the checkpoint's manifest back as ``S``'s next snapshot (a
full one, the sequence after ``S``'s latest), through the same conditional
pointer write as every snapshot.
"""

from __future__ import annotations

from sandgrid.errors import Conflict, ErrorCode, InvalidInput, LimitExceeded, NotFound
from sandgrid.lifecycle import MAX_CHECKPOINTS, check_checkpoint_name
from sandgrid.wire.objects import keys
from worker.snapshots import lifecycle, pointer
from worker.snapshots.catalog import Catalog
from worker.snapshots.refs import SnapshotRef, make_ref

__all__ = ["checkpoint_id", "checkpoints", "create", "delete", "drop_all", "owner_of", "restore"]

_SEP = ".ck."


def checkpoint_id(session_id: str, name: str) -> str:
    """The hidden session that keeps checkpoint ``name`` of ``session_id``."""
    keys.check_id("session_id", session_id)
    if not check_checkpoint_name(name):
        raise InvalidInput(
            f"checkpoint name {name!r} must be 1-48 of A-Z a-z 0-9 _ -, starting alphanumeric",
            operation="checkpoints",
            context={"field": "name", "rule": "1-48 of A-Z a-z 0-9 _ -, starting alphanumeric"},
        )
    return f"{session_id}{_SEP}{name}"


def owner_of(stored_id: str) -> str:
    """The session a stored id belongs to: itself, or the session of a checkpoint."""
    return stored_id.split(_SEP, 1)[0]


def checkpoints(catalog: Catalog, tenant: str, session_id: str) -> dict[str, str]:
    """The session's checkpoints: name -> the snapshot each keeps."""
    prefix = f"{session_id}{_SEP}"
    listed = catalog.objects.list(
        f"{keys.sessions_prefix(tenant)}{keys.check_id('session_id', session_id)}{_SEP}"
    )
    hidden = {p[0] for p in (keys.parse_session_key(tenant, k) for k in listed) if p and not p[1]}
    found: dict[str, str] = {}
    for one in sorted(hidden):
        history = catalog.read_pointer(tenant, one)
        if history and one.startswith(prefix):
            found[one[len(prefix) :]] = history[-1][0]
    return found


def create(catalog: Catalog, tenant: str, session_id: str, name: str) -> SnapshotRef:
    """Keep the session's latest snapshot as checkpoint ``name``.

    Raises:
        InvalidInput: a bad name. Conflict: the name is taken (``checkpoint_exists``),
            or the session has no snapshot (``no_snapshot``).
        LimitExceeded: the session has ``MAX_CHECKPOINTS`` already.
    """
    hidden = checkpoint_id(session_id, name)
    existing = checkpoints(catalog, tenant, session_id)
    if name in existing:
        raise Conflict(
            f"checkpoint {name!r} exists in session {session_id}; delete it first",
            code=ErrorCode.CHECKPOINT_EXISTS,
            operation="checkpoints.create",
            context={"field": "name", "checkpoint": name},
        )
    if len(existing) >= MAX_CHECKPOINTS:
        raise LimitExceeded(
            f"session {session_id} has {len(existing)} checkpoints, the most it may keep; "
            "delete one first",
            operation="checkpoints.create",
            context={"limit": "max_checkpoints", "max": MAX_CHECKPOINTS},
            retry_after=1.0,
        )
    if not catalog.read_pointer(tenant, session_id):
        raise Conflict(
            f"session {session_id} has no saved workspace yet: run a turn that changes it first",
            code=ErrorCode.NO_SNAPSHOT,
            operation="checkpoints.create",
            context={"session": session_id},
        )
    return lifecycle.fork(catalog, tenant, session_id, hidden)


def delete(catalog: Catalog, tenant: str, session_id: str, name: str) -> None:
    """Delete checkpoint ``name`` (its blobs are left to ``gc``).

    Raises:
        NotFound: no such checkpoint.
    """
    hidden = checkpoint_id(session_id, name)
    if not catalog.read_pointer(tenant, hidden):
        raise _missing(session_id, name)
    catalog.delete_session(tenant, hidden)


def drop_all(catalog: Catalog, tenant: str, session_id: str) -> int:
    """Delete every checkpoint of a closed session; how many."""
    names = list(checkpoints(catalog, tenant, session_id))
    for name in names:
        catalog.delete_session(tenant, checkpoint_id(session_id, name))
    return len(names)


def restore(catalog: Catalog, tenant: str, session_id: str, name: str) -> SnapshotRef:
    """Make checkpoint ``name`` the session's latest snapshot.

    Raises:
        NotFound: no such checkpoint.
        SnapshotError: the session's pointer moved on meanwhile (retryable).
    """
    hidden = checkpoint_id(session_id, name)
    source = catalog.read_latest(tenant, hidden)
    if source is None:
        raise _missing(session_id, name)
    before = pointer.read(catalog.objects, tenant, session_id)
    seq = max((int(n[:12]) for n, _ in before.history), default=0) + 1
    copy = lifecycle.copy_manifest(source, session_id, seq, parent=f"{hidden}/{source.name}")
    catalog.write_manifest(copy)
    catalog.advance_pointer(copy, before)
    return make_ref(copy)


def _missing(session_id: str, name: str) -> NotFound:
    return NotFound(
        f"session {session_id} has no checkpoint {name!r}",
        operation="checkpoints",
        context={"session": session_id, "checkpoint": name},
    )
