"""The snapshot manifest: what a workspace held, and where each file's bytes live.

A manifest lists every entry under the snapshot roots, sorted by path (see
``entries`` for their shape and rules). Its *hash* covers the roots and the
entries only (never the session, the sequence or where the bytes are stored),
so two snapshots of the same tree have the same hash and "nothing changed" is
one comparison.

``where`` maps each file's sha256 to the blob holding it (the file's own blob,
or a pack of small files) and the offset in it; ``blobs`` gives each blob's
uncompressed size, so a restore knows exactly how much to inflate. A stored
manifest is validated in full when it is read: ids, owner, entries, hash,
completeness.

Stored format (JSON, version 1); a file's row ends with the index of its blob
in ``blobs`` and its offset there, so no hash is written twice::

    {"v": 1, "tenant", "session", "seq", "id", "created", "parent", "roots", "hash",
     "blobs": [[blob, size], ...],
     "entries": [[path, type, mode, size, sha256, target, blob_index, offset], ...]}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler.errors import ErrorCode, InvalidInput, SnapshotError
from worker.snapshots.entries import Entry, ManifestLimits, check_roots, validate_entries
from worker.snapshots.keys import SHA256_RE, check_id, snapshot_name

__all__ = ["MANIFEST_VERSION", "Location", "Manifest", "content_hash"]

MANIFEST_VERSION = 1


class Location(NamedTuple):
    """Where a file's bytes are: a blob (its own, or a pack) and the offset in it."""

    blob: str
    offset: int


@dataclass(frozen=True, eq=False)
class Manifest:
    """One snapshot of a session's workspace (immutable; see the module doc)."""

    tenant: str
    session_id: str
    seq: int
    snapshot_id: str
    created: float
    parent: str | None
    roots: tuple[str, ...]
    entries: tuple[Entry, ...]
    hash: str
    where: Mapping[str, Location]
    blobs: Mapping[str, int]
    v: int = MANIFEST_VERSION

    @property
    def name(self) -> str:
        """``<seq>-<id>``: the snapshot's name within its session."""
        return snapshot_name(self.seq, self.snapshot_id)

    def files(self) -> Iterator[Entry]:
        return (e for e in self.entries if e.type == "file")

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files())

    def to_json(self) -> bytes:
        blobs = sorted(self.blobs)
        index = {b: i for i, b in enumerate(blobs)}
        where = {sha: (index[loc.blob], loc.offset) for sha, loc in self.where.items()}
        rows = [(*e, *where[e.sha256]) if e.sha256 else (*e, None, None) for e in self.entries]
        doc = {
            "v": self.v,
            "tenant": self.tenant,
            "session": self.session_id,
            "seq": self.seq,
            "id": self.snapshot_id,
            "created": self.created,
            "parent": self.parent,
            "roots": list(self.roots),
            "hash": self.hash,
            "blobs": [(b, self.blobs[b]) for b in blobs],
            "entries": rows,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(
        cls, data: bytes, *, tenant: str, session_id: str, name: str, limits: ManifestLimits
    ) -> Manifest:
        """Parse and fully validate a stored manifest for this tenant and session.

        Raises:
            SnapshotError: ``snapshot_corrupt`` when anything is malformed, when
                the manifest belongs to another tenant, session or name, when an
                entry fails validation, or when the hash does not match.
        """
        try:
            doc = json.loads(data)
            manifest = _from_doc(doc, limits)
        except InvalidInput as exc:
            raise _corrupt(name, exc.message) from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _corrupt(name, f"malformed manifest ({type(exc).__name__}: {exc})") from None
        if (manifest.tenant, manifest.session_id, manifest.name) != (tenant, session_id, name):
            raise _corrupt(name, "the manifest belongs to another tenant, session or snapshot")
        return manifest


def _corrupt(name: str, why: str) -> SnapshotError:
    return SnapshotError(
        f"snapshot {name} is refused: {why}",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.restore",
        context={"snapshot": name},
    )


def _from_doc(doc: dict[str, Any], limits: ManifestLimits) -> Manifest:
    if doc["v"] != MANIFEST_VERSION:
        raise ValueError(f"unknown manifest version {doc['v']!r}")
    roots = check_roots(doc["roots"])
    rows = doc["entries"]
    if not isinstance(rows, list) or any(not isinstance(r, list) or len(r) != 8 for r in rows):
        raise ValueError("entries must be a list of 8-element lists")
    entries = tuple(Entry(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows)
    validate_entries(entries, roots, limits)
    if [e.path for e in entries] != sorted(e.path for e in entries):
        raise ValueError("entries are not sorted by path")
    if content_hash(roots, entries) != doc["hash"]:
        raise ValueError("the manifest hash does not match its entries")
    blobs, where = _locations(doc["blobs"], rows)
    seq, snapshot_id = doc["seq"], doc["id"]
    if type(seq) is not int or seq < 1 or not isinstance(snapshot_id, str):
        raise ValueError("bad sequence number or snapshot id")
    parent = doc["parent"]
    if parent is not None and (not isinstance(parent, str) or len(parent) > 300):
        raise ValueError("bad parent")
    return Manifest(
        tenant=check_id("tenant", doc["tenant"]),
        session_id=check_id("session_id", doc["session"]),
        seq=seq,
        snapshot_id=snapshot_id,
        created=float(doc["created"]),
        parent=parent,
        roots=roots,
        entries=entries,
        hash=str(doc["hash"]),
        where=where,
        blobs=blobs,
    )


def _locations(
    raw_blobs: list[list[Any]], rows: list[list[Any]]
) -> tuple[dict[str, int], dict[str, Location]]:
    """Completeness: every file's bytes lie inside a known blob of known size."""
    names = [str(b) for b, _ in raw_blobs]
    blobs = {str(b): int(size) for b, size in raw_blobs}
    if len(blobs) != len(names) or any(
        not SHA256_RE.fullmatch(b) or size < 0 for b, size in blobs.items()
    ):
        raise ValueError("bad blob list")
    where: dict[str, Location] = {}
    for path, kind, _, size, sha, _, i, offset in rows:
        if kind != "file":
            continue
        if type(i) is not int or type(offset) is not int or not 0 <= i < len(names):
            raise ValueError(f"no blob holds the content of {path!r}")
        if offset < 0 or offset + size > blobs[names[i]]:
            raise ValueError(f"the content of {path!r} lies outside its blob")
        where[sha] = Location(names[i], offset)
    return blobs, where


def content_hash(roots: Sequence[str], entries: Sequence[Entry]) -> str:
    """The manifest hash: sha256 of the canonical JSON of roots and entries."""
    doc = json.dumps([list(roots), entries], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()
