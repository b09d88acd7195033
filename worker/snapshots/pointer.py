"""A session's pointer: its retained snapshots, newest last, and what retention keeps.

The pointer (``keys.pointer_key``) is the one object that makes a manifest a
snapshot: it is written after the manifest and the blobs. It lists the
retained snapshots ``(name, hash)`` oldest first, and the base of each one
stored as a difference (see ``manifest``)::

    {"v": 2, "history": [[name, hash], ...], "bases": {name: base_name}}

Retention keeps the last ``keep`` snapshots and the full manifests those are
based on; the rest fall out of the pointer and their manifests are deleted.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, NamedTuple

from scheduler.errors import InvalidInput
from worker.snapshots import keys
from worker.snapshots.blobs import decode, encode
from worker.snapshots.manifest import Manifest, corrupt

if TYPE_CHECKING:
    from worker.snapshots.base import SnapshotStore

__all__ = ["POINTER_VERSION", "Pointer", "advance", "read", "retain"]

POINTER_VERSION = 2
_MAX_POINTER_BYTES = 1 << 20


class Pointer(NamedTuple):
    history: list[tuple[str, str]]
    """``(name, hash)`` of every retained snapshot, oldest first."""
    bases: dict[str, str]
    """The base of each retained snapshot stored as a difference."""


def read(store: SnapshotStore, tenant: str, session_id: str) -> Pointer:
    """The session's pointer; empty when it has no snapshot.

    Raises:
        SnapshotError: ``snapshot_corrupt`` for an unreadable or empty pointer.
        InfrastructureError: ``store_unavailable``.
    """
    try:
        stored = store._get(keys.pointer_key(tenant, session_id))
    except KeyError:
        return Pointer([], {})
    try:
        doc = json.loads(bytes(decode(stored, limit=_MAX_POINTER_BYTES)))
        if doc["v"] != POINTER_VERSION:
            raise ValueError(f"unknown pointer version {doc['v']!r}")
        history = [(keys.check_snapshot_name(n), str(h)) for n, h in doc["history"]]
        bases = {
            keys.check_snapshot_name(n): keys.check_snapshot_name(b)
            for n, b in doc["bases"].items()
        }
    except (ValueError, TypeError, KeyError, AttributeError, InvalidInput) as exc:
        raise corrupt(session_id, f"unreadable pointer ({exc})") from None
    if not history:
        raise corrupt(session_id, "empty pointer")
    return Pointer(history, bases)


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


def advance(store: SnapshotStore, manifest: Manifest, pointer: Pointer) -> list[str]:
    """Write the pointer that makes ``manifest`` the session's latest snapshot.

    Returns:
        The names of the snapshots that fell out of retention (the caller
        deletes their manifests).

    Raises:
        InfrastructureError: ``store_unavailable``.
    """
    kept, dropped = retain(pointer, manifest, store.keep)
    doc = {"v": POINTER_VERSION, "history": kept.history, "bases": kept.bases}
    store._put(
        keys.pointer_key(manifest.tenant, manifest.session_id), encode(json.dumps(doc).encode())
    )
    return dropped
