"""A session's pointer: its retained snapshots, newest last, and what retention keeps.

The pointer (``keys.pointer_key``) is the one object that makes a manifest a
snapshot: it is written after the manifest and the blobs. It lists the
retained snapshots ``(name, hash)`` oldest first, and the base of each one
stored as a difference (see ``manifest``)::

    {"v": 2, "history": [[name, hash], ...], "bases": {name: base_name}}

A pointer may also *carry* small snapshots (version 4): their manifests, and
the bytes of the blobs they added, travel inside the one conditional write
that makes the latest a snapshot. The carried snapshots are a chain: each
write carries the ones before it again, as long as retention keeps them and
the chain fits the carry budget, so a run of small snapshots is one write
each. Once the chain passes half the budget it is stored as its own objects
after the turn's answer (``Catalog.fold_out_later``), and the next write
starts a new chain; a chain is also stored before a pointer that must name
it as stored (``Catalog.ensure_folded``)::

    {"v": 4, ..., "carried": {"manifests": [[name, "<the manifest's JSON>"], ...],
                              "blobs": [[blob, "<base64 of its raw bytes>"], ...]}}

Every carried name is one the history retains, and the carried blobs are
those some carried manifest names. Version 3 carried the latest snapshot
alone (``"carried": {"name": ..., "manifest": ..., "blobs": ...}``); it is
still read. A pointer that carries nothing is still written as version 2.

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

__all__ = [
    "CARRYING_VERSION",
    "CHAIN_VERSION",
    "MAX_POINTER_BYTES",
    "POINTER_VERSION",
    "Carried",
    "Pointer",
    "advance",
    "read",
    "retain",
]

POINTER_VERSION = 2
"""The version of a pointer that carries no snapshot."""
CARRYING_VERSION = 3
"""The version of a pointer that carries its latest snapshot alone (read only)."""
CHAIN_VERSION = 4
"""The version of a pointer that carries a chain of small snapshots."""
MAX_POINTER_BYTES = 2 << 20
"""A pointer read is at most this (the largest carry budget, its blobs in base64)."""


class Carried(NamedTuple):
    """The snapshots a pointer carries (see the module doc)."""

    manifests: dict[str, bytes]
    """Each carried snapshot's stored JSON (``Manifest.to_json``), by name, oldest first."""
    blobs: dict[str, bytes]
    """The raw bytes of the blobs they added, by blob name (not yet stored on their own)."""
    refs: dict[str, frozenset[str]]
    """The blobs each carried snapshot names (every blob of it, stored or carried)."""

    @classmethod
    def of(cls, manifest: Manifest, doc: bytes, blobs: dict[str, bytes]) -> Carried:
        """One snapshot to carry: its manifest, its JSON, and the blobs it added."""
        return cls({manifest.name: doc}, blobs, {manifest.name: frozenset(manifest.blobs)})

    @property
    def latest(self) -> str:
        """The newest carried snapshot."""
        return next(reversed(self.manifests))

    @property
    def size(self) -> int:
        """What the chain weighs against the carry budget (manifests and raw blobs)."""
        return sum(map(len, self.manifests.values())) + sum(map(len, self.blobs.values()))

    def then(self, new: Carried) -> Carried:
        """This chain with ``new`` after it."""
        return Carried(
            {**self.manifests, **new.manifests},
            {**self.blobs, **new.blobs},
            {**self.refs, **new.refs},
        )

    def kept(self, names: set[str]) -> Carried | None:
        """The chain cut down to the snapshots ``names`` retains, and the blobs they
        name (None when none is left)."""
        manifests = {n: m for n, m in self.manifests.items() if n in names}
        if not manifests:
            return None
        refs = {n: self.refs[n] for n in manifests}
        named = frozenset().union(*refs.values())
        return Carried(manifests, {b: d for b, d in self.blobs.items() if b in named}, refs)


class Pointer(NamedTuple):
    history: list[tuple[str, str]]
    """``(name, hash)`` of every retained snapshot, oldest first."""
    bases: dict[str, str]
    """The base of each retained snapshot stored as a difference."""
    tag: str | None = None
    """The stored version this was read from (None: there was no pointer)."""
    carried: Carried | None = None
    """The small snapshots the pointer carries, if any."""


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
        doc = json.loads(bytes(decode(stored, limit=MAX_POINTER_BYTES)))
        if doc["v"] not in (POINTER_VERSION, CARRYING_VERSION, CHAIN_VERSION):
            raise ValueError(f"unknown pointer version {doc['v']!r}")
        history = [(keys.check_snapshot_name(n), str(h)) for n, h in doc["history"]]
        bases = {
            keys.check_snapshot_name(n): keys.check_snapshot_name(b)
            for n, b in doc["bases"].items()
        }
        carried = _carried(doc) if doc["v"] != POINTER_VERSION else None
    except (ValueError, TypeError, KeyError, AttributeError, InvalidInput) as exc:
        raise corrupt(session_id, f"unreadable pointer ({exc})") from None
    if not history:
        raise corrupt(session_id, "empty pointer")
    if carried is not None and not set(carried.manifests) <= {n for n, _ in history}:
        raise corrupt(session_id, "the pointer carries a snapshot its history does not name")
    return Pointer(history, bases, tag, carried)


def _carried(doc: dict[str, Any]) -> Carried:
    raw = doc["carried"]
    listed = [[raw["name"], raw["manifest"]]] if doc["v"] == CARRYING_VERSION else raw["manifests"]
    manifests: dict[str, bytes] = {}
    refs: dict[str, frozenset[str]] = {}
    for name, manifest in listed:
        if not isinstance(manifest, str) or keys.check_snapshot_name(name) in manifests:
            raise ValueError("a carried manifest is not a string, or is carried twice")
        manifests[name] = manifest.encode()
        refs[name] = frozenset(str(blob) for blob, _ in json.loads(manifest)["blobs"])
    if not manifests:
        raise ValueError("the pointer carries no manifest")
    blobs: dict[str, bytes] = {}
    for blob, data in raw["blobs"]:
        if not isinstance(blob, str) or not keys.SHA256_RE.fullmatch(blob) or blob in blobs:
            raise ValueError("bad carried blob name")
        blobs[blob] = base64.b64decode(data, validate=True)
    return Carried(manifests, blobs, refs)


def _doc(kept: Pointer, carried: Carried | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"v": POINTER_VERSION, "history": kept.history, "bases": kept.bases}
    if carried is not None:
        doc["v"] = CHAIN_VERSION
        doc["carried"] = {
            "manifests": [[n, m.decode()] for n, m in carried.manifests.items()],
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
    the stored pointer is still the one ``pointer`` was read from. The pointer
    carries ``carried``, cut down to what retention keeps (``Carried.kept``);
    every snapshot the new pointer names and does not carry must be stored
    already, with its blobs (the caller folds out what it stops carrying).

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
    if carried is not None:
        carried = carried.kept({n for n, _ in kept.history})
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
