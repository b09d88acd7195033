"""A session's pointer: its retained snapshots, newest last, and what retention keeps.

The pointer (``keys.pointer_key``) is the one object that makes a manifest a
snapshot: it is written after the manifest and the blobs. It lists the
retained snapshots ``(name, hash)`` oldest first, and the base of each one
stored as a difference (see ``manifest``)::

    {"v": 2, "history": [[name, hash], ...], "bases": {name: base_name}}

A pointer may also *carry* its latest snapshot (version 3): the manifest and
the bytes of the blobs that snapshot added travel inside the one conditional
write that makes it a snapshot, and are stored as their own objects after the
turn's answer (``Catalog.fold_out_later``), or before the next pointer write
(``Catalog.ensure_folded``)::

    {"v": 3, ..., "carried": {"name": name, "manifest": "<the manifest's JSON>",
                              "blobs": [[blob, "<base64 of its raw bytes>"], ...]}}

Only the latest can be carried: every other snapshot a pointer names is a
stored manifest whose blobs are stored. A pointer that carries nothing is
still written as version 2, so readers of version 2 read it.

Retention keeps the last ``keep`` snapshots and the full manifests those are
based on; the rest fall out of the pointer and their manifests are deleted.
"""

from __future__ import annotations

import base64
import json
from typing import Any, NamedTuple

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore, StoreConflict
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.manifest import Manifest, corrupt

__all__ = ["CARRYING_VERSION", "POINTER_VERSION", "Carried", "Pointer", "advance", "read", "retain"]

POINTER_VERSION = 2
"""The version of a pointer that carries no snapshot."""
CARRYING_VERSION = 3
"""The version of a pointer that carries its latest snapshot."""
_MAX_POINTER_BYTES = 1 << 20


class Carried(NamedTuple):
    """A snapshot that travels inside its session's pointer (see the module doc)."""

    name: str
    manifest: bytes
    """The manifest's stored JSON (``Manifest.to_json``)."""
    blobs: dict[str, bytes]
    """The raw bytes of the blobs it added, by blob name (not yet stored on their own)."""


class Pointer(NamedTuple):
    history: list[tuple[str, str]]
    """``(name, hash)`` of every retained snapshot, oldest first."""
    bases: dict[str, str]
    """The base of each retained snapshot stored as a difference."""
    tag: str | None = None
    """The stored version this was read from (None: there was no pointer)."""
    carried: Carried | None = None
    """The latest snapshot, when the pointer carries it."""


def read(objects: ObjectStore, tenant: str, session_id: str) -> Pointer:
    """The session's pointer; empty when it has no snapshot.

    Raises:
        SnapshotError: ``snapshot_corrupt`` for an unreadable or empty pointer.
        InfrastructureError: ``store_unavailable``.
    """
    try:
        stored, tag = objects.get_tagged(keys.pointer_key(tenant, session_id))
    except KeyError:
        return Pointer([], {})
    try:
        doc = json.loads(bytes(decode(stored, limit=_MAX_POINTER_BYTES)))
        if doc["v"] not in (POINTER_VERSION, CARRYING_VERSION):
            raise ValueError(f"unknown pointer version {doc['v']!r}")
        history = [(keys.check_snapshot_name(n), str(h)) for n, h in doc["history"]]
        bases = {
            keys.check_snapshot_name(n): keys.check_snapshot_name(b)
            for n, b in doc["bases"].items()
        }
        carried = _carried(doc) if doc["v"] == CARRYING_VERSION else None
    except (ValueError, TypeError, KeyError, AttributeError, InvalidInput) as exc:
        raise corrupt(session_id, f"unreadable pointer ({exc})") from None
    if not history:
        raise corrupt(session_id, "empty pointer")
    if carried is not None and carried.name != history[-1][0]:
        raise corrupt(session_id, "the pointer carries a snapshot other than its latest")
    return Pointer(history, bases, tag, carried)


def _carried(doc: dict[str, Any]) -> Carried:
    raw = doc["carried"]
    blobs: dict[str, bytes] = {}
    for blob, data in raw["blobs"]:
        if not isinstance(blob, str) or not keys.SHA256_RE.fullmatch(blob) or blob in blobs:
            raise ValueError("bad carried blob name")
        blobs[blob] = base64.b64decode(data, validate=True)
    manifest = raw["manifest"]
    if not isinstance(manifest, str):
        raise ValueError("the carried manifest is not a string")
    return Carried(keys.check_snapshot_name(raw["name"]), manifest.encode(), blobs)


def _doc(kept: Pointer, carried: Carried | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"v": POINTER_VERSION, "history": kept.history, "bases": kept.bases}
    if carried is not None:
        doc["v"] = CARRYING_VERSION
        doc["carried"] = {
            "name": carried.name,
            "manifest": carried.manifest.decode(),
            "blobs": [
                [b, base64.b64encode(carried.blobs[b]).decode()] for b in sorted(carried.blobs)
            ],
        }
    return doc


def retain(pointer: Pointer, manifest: Manifest, keep: int) -> tuple[Pointer, list[str]]:
    """The pointer once ``manifest`` is the latest, and the snapshots it drops:
    the last ``keep`` stay, with the full manifests they are differences from."""
    full = [*pointer.history, (manifest.name, manifest.hash)]
    links = dict(pointer.bases)
    if manifest.base is not None:
        links[manifest.name] = manifest.base
    wanted = {name for name, _ in full[-keep:]}
    wanted |= {links[n] for n in wanted if n in links}
    kept = Pointer(
        [h for h in full if h[0] in wanted],
        {n: b for n, b in links.items() if n in wanted},
    )
    return kept, [name for name, _ in full if name not in wanted]


def advance(
    objects: ObjectStore,
    manifest: Manifest,
    pointer: Pointer,
    keep: int,
    carried: Carried | None = None,
) -> tuple[list[str], Pointer | None]:
    """Write the pointer that makes ``manifest`` the session's latest snapshot, if
    the stored pointer is still the one ``pointer`` was read from. With
    ``carried`` (``manifest`` itself, and the blobs it added) the pointer carries
    it; without, ``manifest`` and its blobs must be stored already, and so must
    whatever ``pointer`` carried (the caller folds it out first).

    The write is conditional (``ObjectStore.put_if``): a worker that lost the session (its
    lease taken over while it was thought dead) cannot put back a history that
    leaves out snapshots taken since, nor can a fork land on a session that has
    snapshots.

    A conflict with a stored pointer that says exactly what ``pointer`` says
    (a tag remembered from a write, spelled otherwise by the store) is no
    conflict: the write is made again on the tag read.

    Returns:
        The names of the snapshots that fell out of retention (the caller
        deletes their manifests), and the pointer written, with its tag when
        the store told it (None after a write that had landed already).

    Raises:
        SnapshotError: ``snapshot_failed``, the pointer moved on since it was read.
        InfrastructureError: ``store_unavailable``.
    """
    kept, dropped = retain(pointer, manifest, keep)
    if carried is not None and carried.name != manifest.name:
        raise ValueError("a pointer carries only the snapshot it makes the latest")
    doc = _doc(kept, carried)
    key = keys.pointer_key(manifest.tenant, manifest.session_id)
    data = encode(json.dumps(doc).encode())
    try:
        tag = objects.put_if(key, data, pointer.tag)
    except StoreConflict:
        now = read(objects, manifest.tenant, manifest.session_id)
        if pointer.tag is not None and now[:2] == pointer[:2] and now.carried == pointer.carried:
            tag = objects.put_if(key, data, now.tag)  # the same pointer: only the tag differed
            return dropped, Pointer(kept.history, kept.bases, tag, carried)
        if not now.history or now.history[-1][0] != manifest.name:  # not our own retry
            raise SnapshotError(
                f"session {manifest.session_id} was snapshotted elsewhere since this "
                f"snapshot started; {manifest.name} is not saved",
                code=ErrorCode.SNAPSHOT_FAILED,
                operation="snapshot",
                context={"session": manifest.session_id, "reason": "pointer_moved"},
            ) from None
        return dropped, None
    return dropped, Pointer(kept.history, kept.bases, tag, carried)
