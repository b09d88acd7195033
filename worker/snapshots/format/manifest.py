"""The snapshot manifest: what a workspace held, and where each file's bytes live.

A manifest lists every entry under the snapshot roots, sorted by path (see
``entries`` for their shape and rules). Its *hash* covers the roots and the
entries only (never the session, the sequence or where the bytes are stored),
so two snapshots of the same tree have the same hash and "nothing changed" is
one comparison. The hash is a two-level tree, git style: each directory's
direct entries are hashed together, and the manifest hash covers the roots and
the (directory, hash) pairs; so a change re-hashes only the directories it
touches (``delta``).

``where`` maps each file's sha256 to the blob holding it (the file's own blob,
or a pack of small files) and the offset in it; ``blobs`` gives each blob's
uncompressed size, so a restore knows exactly how much to inflate. A stored
manifest is validated in full when it is read: ids, owner, entries, hash,
completeness.

Stored format (JSON, version 2); a file's row ends with the index of its blob
in ``blobs`` and its offset there, so no hash is written twice. A manifest is
stored *full*::

    {"v": 2, "tenant", "session", "seq", "id", "created", "parent", "roots", "hash",
     "base": null, "blobs": [[blob, size], ...],
     "entries": [[path, type, mode, size, sha256, target, blob_index, offset], ...]}

or as a *difference* from a full manifest of the same session, ``base`` (so a
one-file change writes a few hundred bytes, not the whole tree)::

    {..., "base": "<name>", "blobs": [...every blob of this snapshot...],
     "upsert": [[path, ...rows as above], ...], "remove": [path, ...]}

A difference is always against a full manifest (never a chain), and its blob
list is complete, so garbage collection reads any manifest on its own.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from sandgrid.wire.objects.keys import SHA256_RE, check_id, check_snapshot_name, snapshot_name
from worker.snapshots.format.entries import Entry, ManifestLimits, check_roots, validate_entries

__all__ = [
    "MANIFEST_VERSION",
    "MAX_MANIFEST_BYTES",
    "Delta",
    "Location",
    "Manifest",
    "content_hash",
    "corrupt",
    "group_by_parent",
    "group_hash",
    "parent_of",
    "tree_hash",
]

MANIFEST_VERSION = 2
MAX_MANIFEST_BYTES = 256 << 20
"""The most a stored manifest may inflate to."""
_ROW_FIELDS = 8


class Location(NamedTuple):
    """Where a file's bytes are: a blob (its own, or a pack) and the offset in it."""

    blob: str
    offset: int


class Delta(NamedTuple):
    """How a manifest differs from its base: entries added or changed, paths removed."""

    upsert: Mapping[str, Entry]
    remove: frozenset[str]

    @property
    def size(self) -> int:
        return len(self.upsert) + len(self.remove)


@dataclass(frozen=True, eq=False)
class Manifest:
    """One snapshot of a session's workspace (immutable; see the module doc).

    ``base`` and ``delta`` say how it is stored: None for a full manifest, or
    the name of a full manifest of the session and the difference from it.
    """

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
    base: str | None = None
    delta: Delta | None = None
    v: int = MANIFEST_VERSION
    known: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """Derived views of these entries already computed (``groups``, ``hashes``,
    ``paths``, ...), by property name; the rest are computed when first used."""
    carried: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """The raw bytes of blobs that travel with this manifest (in its session's
    pointer, see ``worker.snapshots.pointer``) rather than stored on their own;
    a restore takes them from here, verified like any blob."""

    def __post_init__(self) -> None:
        self.__dict__.update(self.known)  # what a cached_property finds first

    @property
    def name(self) -> str:
        """``<seq>-<id>``: the snapshot's name within its session."""
        return snapshot_name(self.seq, self.snapshot_id)

    def files(self) -> Iterator[Entry]:
        return (e for e in self.entries if e.type == "file")

    # ---- derived views, each computed once (see ``known``) --------------------------

    @cached_property
    def file_count(self) -> int:
        return sum(1 for e in self.entries if e.type == "file")

    @cached_property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries if e.type == "file")

    @cached_property
    def entry_set(self) -> frozenset[Entry]:
        """The entries as a set: what a new scan is compared with."""
        return frozenset(self.entries)

    @cached_property
    def paths(self) -> list[str]:
        """The entries' paths (sorted)."""
        return [e.path for e in self.entries]

    @cached_property
    def groups(self) -> Mapping[str, tuple[Entry, ...]]:
        """The entries by parent directory, each group sorted."""
        return group_by_parent(self.entries)

    @cached_property
    def hashes(self) -> Mapping[str, str]:
        """The per-directory hashes (see ``tree_hash``)."""
        return {d: group_hash(g) for d, g in self.groups.items()}

    @cached_property
    def sha_refs(self) -> Mapping[str, int]:
        """How many files hold each content."""
        return Counter(e.sha256 for e in self.entries if e.sha256 is not None)

    @cached_property
    def blob_refs(self) -> Mapping[str, int]:
        """How many of the contents in ``where`` each blob holds."""
        return Counter(loc.blob for loc in self.where.values())

    def to_json(self) -> bytes:
        blobs = sorted(self.blobs)
        index = {b: i for i, b in enumerate(blobs)}

        def row(e: Entry) -> tuple[Any, ...]:
            if e.sha256 is None:
                return (*e, None, None)
            loc = self.where[e.sha256]
            return (*e, index[loc.blob], loc.offset)

        doc: dict[str, Any] = {
            "v": self.v,
            "tenant": self.tenant,
            "session": self.session_id,
            "seq": self.seq,
            "id": self.snapshot_id,
            "created": self.created,
            "parent": self.parent,
            "roots": list(self.roots),
            "hash": self.hash,
            "base": self.base,
            "blobs": [(b, self.blobs[b]) for b in blobs],
        }
        if self.base is None or self.delta is None:
            doc["base"] = None
            doc["entries"] = list(map(row, self.entries))
        else:
            doc["upsert"] = [row(self.delta.upsert[p]) for p in sorted(self.delta.upsert)]
            doc["remove"] = sorted(self.delta.remove)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(
        cls,
        data: bytes,
        *,
        tenant: str,
        session_id: str,
        name: str,
        limits: ManifestLimits,
        load_base: Callable[[str], Manifest] | None = None,
    ) -> Manifest:
        """Parse and fully validate a stored manifest for this tenant and session.

        Args:
            load_base: reads the full manifest a difference is based on (a
                manifest of the same session; None refuses differences).

        Raises:
            SnapshotError: ``snapshot_corrupt`` when anything is malformed, when
                the manifest belongs to another tenant, session or name, when an
                entry fails validation, or when the hash does not match.
        """
        try:
            doc = json.loads(data)
            manifest = _from_doc(doc, limits, load_base)
        except InvalidInput as exc:
            raise corrupt(name, exc.message) from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise corrupt(name, f"malformed manifest ({type(exc).__name__}: {exc})") from None
        if (manifest.tenant, manifest.session_id, manifest.name) != (tenant, session_id, name):
            raise corrupt(name, "the manifest belongs to another tenant, session or snapshot")
        return manifest


def corrupt(name: str, why: str) -> SnapshotError:
    """The error of a stored snapshot (manifest, pointer) that is refused."""
    return SnapshotError(
        f"snapshot {name} is refused: {why}",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.restore",
        context={"snapshot": name},
    )


_Located = tuple[Entry, str | None, int | None]
"""An entry with the blob and offset of its bytes (None for non-files)."""


def _from_doc(
    doc: dict[str, Any], limits: ManifestLimits, load_base: Callable[[str], Manifest] | None
) -> Manifest:
    if doc["v"] != MANIFEST_VERSION:
        raise ValueError(f"unknown manifest version {doc['v']!r}")
    roots = check_roots(doc["roots"])
    blobs = _blob_list(doc["blobs"])
    seq, snapshot_id = doc["seq"], doc["id"]
    if type(seq) is not int or seq < 1 or not isinstance(snapshot_id, str):
        raise ValueError("bad sequence number or snapshot id")
    base_name, delta = doc["base"], None
    if base_name is None:
        located = _rows(doc["entries"], list(blobs))
        if [e.path for e, _, _ in located] != sorted(e.path for e, _, _ in located):
            raise ValueError("entries are not sorted by path")
    else:
        base = _base(base_name, seq, roots, load_base)
        located, delta = _apply(base, doc["upsert"], doc["remove"], list(blobs))
    entries = tuple(e for e, _, _ in located)
    validate_entries(entries, roots, limits)
    groups = group_by_parent(entries)
    hashes = {d: group_hash(g) for d, g in groups.items()}
    if tree_hash(roots, hashes) != doc["hash"]:
        raise ValueError("the manifest hash does not match its entries")
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
        where=_where(located, blobs),
        blobs=blobs,
        base=base_name,
        delta=delta,
        known={"groups": groups, "hashes": hashes},
    )


def _blob_list(raw: list[list[Any]]) -> dict[str, int]:
    names = [str(b) for b, _ in raw]
    blobs = {str(b): int(size) for b, size in raw}
    if len(blobs) != len(names) or any(
        not SHA256_RE.fullmatch(b) or size < 0 for b, size in blobs.items()
    ):
        raise ValueError("bad blob list")
    return dict(zip(names, (int(s) for _, s in raw), strict=True))


def _rows(rows: Any, names: list[str]) -> list[_Located]:
    """Stored rows as entries with their blob and offset (blob index resolved)."""
    if not isinstance(rows, list) or any(
        not isinstance(r, list) or len(r) != _ROW_FIELDS for r in rows
    ):
        raise ValueError(f"entries must be a list of {_ROW_FIELDS}-element lists")
    out: list[_Located] = []
    for r in rows:
        e = Entry(r[0], r[1], r[2], r[3], r[4], r[5])
        i, offset = r[6], r[7]
        if e.type != "file":
            out.append((e, None, None))
            continue
        if type(i) is not int or type(offset) is not int or not 0 <= i < len(names):
            raise ValueError(f"no blob holds the content of {e.path!r}")
        out.append((e, names[i], offset))
    return out


def _base(
    name: Any, seq: int, roots: tuple[str, ...], load_base: Callable[[str], Manifest] | None
) -> Manifest:
    if load_base is None:
        raise ValueError("a difference manifest where a full one was expected")
    if int(check_snapshot_name(name)[:12]) >= seq:  # never a loop
        raise ValueError(f"base {name} is not an earlier full manifest")
    base = load_base(name)
    if base.base is not None or base.seq >= seq or base.roots != roots:
        raise ValueError(f"base {name} is not an earlier full manifest with the same roots")
    return base


def _apply(
    base: Manifest, upsert: Any, remove: Any, names: list[str]
) -> tuple[list[_Located], Delta]:
    """The base's entries with a stored difference applied, in path order."""
    changed = _rows(upsert, names)
    if not isinstance(remove, list) or not all(isinstance(p, str) for p in remove):
        raise ValueError("remove must be a list of paths")
    gone = frozenset(remove)
    by_path: dict[str, _Located] = {}
    for e in base.entries:
        if e.path not in gone:
            loc = base.where[e.sha256] if e.sha256 is not None else None
            by_path[e.path] = (e, loc.blob, loc.offset) if loc else (e, None, None)
    delta = Delta({e.path: e for e, _, _ in changed}, gone)
    if len(delta.upsert) != len(changed):
        raise ValueError("a path appears twice in upsert")
    for row in changed:
        by_path[row[0].path] = row
    return [by_path[p] for p in sorted(by_path)], delta


def _where(located: list[_Located], blobs: Mapping[str, int]) -> dict[str, Location]:
    """Completeness: every file's bytes lie inside a listed blob of known size."""
    where: dict[str, Location] = {}
    for e, blob, offset in located:
        if blob is None or offset is None:
            continue
        if blob not in blobs:
            raise ValueError(f"no blob holds the content of {e.path!r}")
        if offset < 0 or offset + e.size > blobs[blob]:
            raise ValueError(f"the content of {e.path!r} lies outside its blob")
        where[str(e.sha256)] = Location(blob, offset)
    return where


# ---- the hash ---------------------------------------------------------------------


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


def group_by_parent(entries: Sequence[Entry]) -> dict[str, tuple[Entry, ...]]:
    """Entries by parent directory; each group keeps the entries' (sorted) order."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.path.rpartition("/")[0], []).append(e)
    return {d: tuple(g) for d, g in groups.items()}


def group_hash(group: Sequence[Entry]) -> str:
    """sha256 of the canonical JSON of one directory's entries (sorted)."""
    doc = json.dumps(group, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()


def tree_hash(roots: Sequence[str], hashes: Mapping[str, str]) -> str:
    """The manifest hash: sha256 of the roots and every (directory, group hash)."""
    doc = json.dumps([list(roots), sorted(hashes.items())], separators=(",", ":"))
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()


def content_hash(roots: Sequence[str], entries: Sequence[Entry]) -> str:
    """The manifest hash of ``entries`` (sorted by path) under ``roots``."""
    groups = group_by_parent(sorted(entries))
    return tree_hash(roots, {d: group_hash(g) for d, g in groups.items()})
