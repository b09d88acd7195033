"""What changed since the previous snapshot, found in time proportional to the change.

A turn usually touches a few files of a workspace that may hold tens of
thousands. ``diff`` compares a new scan with the previous manifest as sets (C
speed), then validates only the entries that are new or changed, and re-hashes
only the directories they sit in (the manifest hash is per directory, see
``manifest``). What it checks is what ``entries.validate_entries`` checks on a
whole tree, restricted to what the change can break:

- each new entry's own rules (path, type, mode, size, sha256, target);
- no path twice (a duplicate is next to its twin in the sorted scan);
- no new entry under a symlink or a file, and no entry, old or new, under an
  entry that has become a symlink or a file;
- the limits on entries and bytes, from the previous totals and the change.

``next_delta`` then says how the new manifest is stored: as a difference from
the full manifest its previous one is based on, unless that difference has
grown past ``1 / DELTA_SHARE`` of the tree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import compress
from operator import ne
from typing import Any

from worker.snapshots.format.entries import (
    Entry,
    ManifestLimits,
    Row,
    bad_entry,
    check_entry,
    check_limits,
    check_parents,
    normalise,
)
from worker.snapshots.format.manifest import Delta, Manifest, group_hash, parent_of, tree_hash

__all__ = ["DELTA_SHARE", "MIN_DELTA", "Change", "diff", "next_delta"]

DELTA_SHARE = 8
"""A change (or a stored difference) larger than 1/8 of the tree is handled in full."""
MIN_DELTA = 64
"""...but one of up to this many entries never is."""


@dataclass(frozen=True)
class Change:
    """A new tree, as the previous manifest plus a validated change."""

    entries: tuple[Entry, ...]
    added: tuple[Entry, ...]
    """Entries new or changed, sorted."""
    removed: frozenset[str]
    """Paths in the previous tree and not in the new one."""
    gone: AbstractSet[Entry]
    """Previous entries not in the new tree (removed or changed)."""
    paths: list[str]
    groups: Mapping[str, tuple[Entry, ...]]
    hashes: Mapping[str, str]
    hash: str
    total_bytes: int
    file_count: int

    def known(self) -> dict[str, Any]:
        """The new tree's derived views (``Manifest.known``) this change computed."""
        return {
            "paths": self.paths,
            "groups": self.groups,
            "hashes": self.hashes,
            "total_bytes": self.total_bytes,
            "file_count": self.file_count,
        }


def _small(changes: int, entries: int) -> bool:
    return changes <= max(MIN_DELTA, entries // DELTA_SHARE)


def diff(
    previous: Manifest, rows: list[Row], roots: tuple[str, ...], limits: ManifestLimits
) -> Change | None:
    """The validated change from ``previous`` to the sorted scan ``rows``.

    Returns:
        None when the change is too large to be worth it, or the scan has
        duplicates: the caller validates the whole tree then.

    Raises:
        InvalidInput: as ``entries.validate_entries``.
    """
    if previous.roots != roots:
        return None
    found = _in_place(previous, rows)
    if found is None:
        new = set(rows)
        if len(new) != len(rows):
            return None
        found = new - previous.entry_set, previous.entry_set - new
    fresh, gone = found
    if not _small(len(fresh) + len(gone), len(rows)):
        return None
    added = sorted(map(normalise, fresh))
    removed = frozenset(e.path for e in gone) - {a.path for a in added}
    entries, paths = _splice(previous, gone, added)
    total = _validate(previous.total_bytes, entries, paths, added, gone, roots, limits)
    groups, hashes = _regroup(previous, added, gone)
    files = sum(1 for a in added if a.type == "file") - sum(1 for e in gone if e.type == "file")
    return Change(
        entries=tuple(entries),
        added=tuple(added),
        removed=removed,
        gone=gone,
        paths=paths,
        groups=groups,
        hashes=hashes,
        hash=tree_hash(roots, hashes),
        total_bytes=total,
        file_count=previous.file_count + files,
    )


def _in_place(
    previous: Manifest, rows: list[Row]
) -> tuple[AbstractSet[Row], AbstractSet[Entry]] | None:
    """``(new rows, gone entries)`` when every path is where it was and only some
    rows changed (files rewritten: the usual turn), found by comparing the two
    sorted lists position by position at C speed; None otherwise."""
    before = previous.entries
    if len(rows) != len(before):
        return None
    where = list(compress(range(len(rows)), map(ne, rows, before)))
    if not _small(len(where), len(rows)) or any(rows[i][0] != before[i][0] for i in where):
        return None
    return {rows[i] for i in where}, {before[i] for i in where}


def _splice(
    previous: Manifest, gone: AbstractSet[Entry], added: list[Entry]
) -> tuple[list[Entry], list[str]]:
    """The new tree's entries and paths, sorted: the previous ones, with what
    went taken out and what came put in (no entry rebuilt)."""
    entries, paths = list(previous.entries), list(previous.paths)
    for e in gone:
        i = bisect_left(paths, e.path)
        del entries[i], paths[i]
    for a in added:
        i = bisect_left(paths, a.path)
        entries.insert(i, a)
        paths.insert(i, a.path)
    return entries, paths


class _Types:
    """Each path's type in the new tree, by binary search of its sorted paths."""

    def __init__(self, entries: list[Entry], paths: list[str]) -> None:
        self.entries, self.paths = entries, paths

    def get(self, path: str) -> str | None:
        i = bisect_left(self.paths, path)
        if i < len(self.paths) and self.paths[i] == path:
            return self.entries[i].type
        return None


def _validate(
    total: int,
    entries: list[Entry],
    paths: list[str],
    added: Sequence[Entry],
    gone: AbstractSet[Entry],
    roots: tuple[str, ...],
    limits: ManifestLimits,
) -> int:
    """Raises ``InvalidInput`` as ``entries.validate_entries``; returns the new total bytes."""
    total -= sum(e.size for e in gone if e.type == "file")
    for a in added:
        check_entry(a, roots, limits)
        if a.type == "file":
            total += a.size
    check_limits(len(paths), total, limits)
    types = _Types(entries, paths)
    for a in added:
        i = bisect_left(paths, a.path)
        if i + 1 < len(paths) and paths[i + 1] == a.path:
            raise bad_entry(a.path, "appears twice")
        check_parents(a.path, roots, types)
        if a.type != "dir":
            below = a.path + "/"
            j = bisect_left(paths, below)
            if j < len(paths) and paths[j].startswith(below):
                raise bad_entry(paths[j], f"lies under {a.path!r}, which is a {a.type}")
    return total


def _regroup(
    previous: Manifest, added: Sequence[Entry], gone: AbstractSet[Entry]
) -> tuple[dict[str, tuple[Entry, ...]], dict[str, str]]:
    """The previous per-directory groups and hashes, redone where the change touches."""
    groups = dict(previous.groups)
    hashes = dict(previous.hashes)
    incoming: dict[str, list[Entry]] = {}
    for a in added:
        incoming.setdefault(parent_of(a.path), []).append(a)
    touched = set(incoming) | {parent_of(e.path) for e in gone}
    for d in touched:
        members = [e for e in groups.get(d, ()) if e not in gone]
        members += incoming.get(d, [])
        if members:
            members.sort()
            groups[d] = tuple(members)
            hashes[d] = group_hash(members)
        else:
            groups.pop(d, None)
            hashes.pop(d, None)
    return groups, hashes


def next_delta(previous: Manifest, change: Change) -> tuple[str, Delta] | None:
    """How to store the manifest after ``change``: ``(base, difference)``, or None
    (store it full) when the difference from the base has grown too large."""
    if previous.base is None:
        base, upsert, remove = previous.name, {}, set()
    elif previous.delta is not None:
        base = previous.base
        upsert, remove = dict(previous.delta.upsert), set(previous.delta.remove)
    else:
        return None
    for path in change.removed:
        upsert.pop(path, None)
        remove.add(path)
    for a in change.added:
        upsert[a.path] = a
        remove.discard(a.path)
    if not _small(len(upsert) + len(remove), len(change.entries)):
        return None
    return base, Delta(upsert, frozenset(remove))
