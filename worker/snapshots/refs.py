"""What the snapshot store hands back: refs to snapshots, drafts, GC reports.

Plain dataclasses: they stay inside the worker. What crosses a wire is a
snapshot's *name* (``SnapshotRef.name``, stored in the session registry).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from worker.snapshots.format.delta import Change
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.manifest import Location, Manifest
from worker.snapshots.pointer import Pointer

__all__ = ["GcReport", "SnapshotDraft", "SnapshotRef", "make_ref"]


@dataclass(frozen=True)
class SnapshotRef:
    """Names one snapshot of a session. ``name`` is what the registry stores.

    ``manifest`` (when the store has it at hand) is the ``previous`` of the next
    snapshot; ``stats`` are the timings and counts of the call that made it.
    """

    tenant: str
    session_id: str
    name: str
    hash: str
    manifest: Manifest | None = field(default=None, compare=False, repr=False)
    stats: Mapping[str, float] = field(default_factory=dict, compare=False, repr=False)

    @property
    def seq(self) -> int:
        return int(self.name[:12])

    def __str__(self) -> str:
        return self.name


@dataclass
class SnapshotDraft:
    """A validated scan that differs from the previous snapshot (``prepare``'s result).

    ``need`` maps each content not known to be stored to one file holding it:
    the paths that ``commit`` needs the bytes of. ``previous`` is the manifest
    the pointer retains that this one follows (the one to store a difference
    from), and ``change`` the change from it when it was found incrementally.
    """

    tenant: str
    session_id: str
    roots: tuple[str, ...]
    entries: tuple[Entry, ...]
    hash: str
    seq: int
    parent: str | None
    where: dict[str, Location]
    blobs: dict[str, int]
    need: dict[str, Entry]
    started: float = field(default_factory=time.time)
    known: dict[str, Any] = field(default_factory=dict)
    """Derived views of the new tree already computed (``Manifest.known``)."""
    previous: Manifest | None = None
    change: Change | None = None
    pointer: Pointer = field(default_factory=lambda: Pointer([], {}))
    """The session's pointer as ``prepare`` read it."""
    heads: dict[str, Future[float | None]] = field(default_factory=dict)
    """HEADs still in flight of large contents in ``need``, packed meanwhile: one
    found stored and fresh is reused, not uploaded (``transfer.plan``)."""

    @property
    def history(self) -> list[tuple[str, str]]:
        return self.pointer.history

    @property
    def paths(self) -> list[str]:
        return sorted(e.path for e in self.need.values())


@dataclass(frozen=True)
class GcReport:
    """What one ``gc`` run did, for the logs and metrics of whoever schedules it."""

    manifests_deleted: int = 0
    blobs_deleted: int = 0
    blobs_referenced: int = 0
    blobs_young: int = 0
    """Unreferenced, but younger than the grace period: kept for now."""


def make_ref(manifest: Manifest, stats: Mapping[str, float] | None = None) -> SnapshotRef:
    return SnapshotRef(
        manifest.tenant, manifest.session_id, manifest.name, manifest.hash, manifest, stats or {}
    )
