"""Memory images staged ahead on the node that will resume them (24.1, resume speed).

A resume used to fetch its image (download, verify, unpack: 0.7-1.3 s for a
190 MB image) before ``runsc restore`` could start. A pause with memory now
asks one other node serving the type to stage the image while the session is
paused (``worker.turns.memory_stage``): that node fetches and verifies it as a
resume would, into ready files here, and the session's record names the node,
so the next turn is routed to it while it lives (``scheduler.turns.routing``).
Its restore then takes the files instead of fetching them: the resume is the
restore alone.

- **keyed by tenant, session and image** (the sha256 of its manifest): an entry
  is handed only to the restore of the session it was fetched for, after its
  record is checked again against the session that asks (``check_meta``);
- **taken once**: ``take`` moves the files into the restore's scratch directory
  and forgets the entry, whatever the restore then does;
- **verified when staged**: the fetch checks the manifest and every chunk, as a
  resume's does; the files stay in this process's own directory until taken
  (the same trust as a fork's files linked between restores, ``memshare``);
- **bounded**: at most ``max_bytes`` (the oldest dropped first) and
  ``max_age_s`` old; one image staged at a time (a request that finds one
  staging is dropped: its resume fetches, as before);
- this process's own directory (``img-<pid>-stage`` in ``IMAGE_DIR``), removed by
  the next node that starts on the host once its process is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from worker.snapshots.memory import MemoryMeta, check_meta

__all__ = ["StagedImages"]

log = logging.getLogger(__name__)

_Key = tuple[str, str, str]


@dataclass(frozen=True)
class _Staged:
    meta: MemoryMeta
    path: Path
    size: int
    at: float


class StagedImages:
    """A node's images staged ahead, ready for ``runsc restore``.

    Args:
        root: this process's own directory (created; emptied first).
        max_bytes: the most kept on disk.
        max_age_s: an entry older than this is dropped, not taken.
        clock: seconds (monotonic); tests pass their own.
    """

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root, self.max_bytes, self.max_age_s, self.clock = root, max_bytes, max_age_s, clock
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, mode=0o700)
        self._entries: dict[_Key, _Staged] = {}
        self._lock = threading.Lock()
        self._staging = threading.Lock()

    @property
    def busy(self) -> bool:
        """An image is being staged now (a new request would be dropped)."""
        return self._staging.locked()

    def size(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def staged(self) -> list[tuple[str, str, str]]:
        """What is staged now: (tenant, session, image) of each entry."""
        with self._lock:
            return list(self._entries)

    def has(self, tenant: str, session: str, sha256: str) -> bool:
        with self._lock:
            return (tenant, session, sha256) in self._entries

    def stage(self, want: MemoryMeta, sha256: str, fill: Callable[[Path], MemoryMeta]) -> bool:
        """Stage image ``sha256`` of ``want``'s session: ``fill(dir)`` fetches and
        verifies it into ``dir`` and answers its record. False when another image is
        staging, or this one is larger than ``max_bytes`` (nothing kept); ``fill``'s
        errors propagate, nothing kept."""
        if not self._staging.acquire(blocking=False):
            return False
        try:
            key = (want.tenant, want.session, sha256)
            if self.has(*key):
                return True
            path = Path(tempfile.mkdtemp(prefix="s-", dir=self.root))
            try:
                meta = fill(path)
                check_meta(meta, want, sha256)
                size = sum(f.stat().st_size for f in path.iterdir())
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            if size > self.max_bytes:
                shutil.rmtree(path, ignore_errors=True)
                return False
            with self._lock:
                self._entries[key] = _Staged(meta, path, size, self.clock())
            self._trim()
            return True
        finally:
            self._staging.release()

    def take(self, want: MemoryMeta, sha256: str, dest: Path) -> MemoryMeta | None:
        """Move staged image ``sha256`` of ``want``'s session into ``dest`` and answer
        its record; None when none is staged (or it is too old). Taken once.

        Raises:
            MemoryRefused: the staged record names another tenant, session,
                snapshot, type or runtime than ``want`` (the entry is dropped).
        """
        self._trim()
        with self._lock:
            entry = self._entries.pop((want.tenant, want.session, sha256), None)
        if entry is None:
            return None
        try:
            check_meta(entry.meta, want, sha256)
            for f in entry.path.iterdir():
                os.replace(f, dest / f.name)
            return entry.meta
        finally:
            shutil.rmtree(entry.path, ignore_errors=True)

    def drop(self, tenant: str, session: str, sha256: str) -> bool:
        """Forget one staged image (its session resumed elsewhere); whether it was here."""
        with self._lock:
            entry = self._entries.pop((tenant, session, sha256), None)
        if entry is not None:
            shutil.rmtree(entry.path, ignore_errors=True)
        return entry is not None

    def _trim(self) -> None:
        """Drop the entries past ``max_age_s``, then the oldest while over ``max_bytes``."""
        now = self.clock()
        with self._lock:
            by_age = sorted(self._entries.items(), key=lambda kv: kv[1].at)  # oldest first
            total = sum(e.size for _, e in by_age)
            gone = []
            for k, e in by_age:
                if now - e.at <= self.max_age_s and total <= self.max_bytes:
                    break
                gone.append(k)
                total -= e.size
            dropped = [self._entries.pop(k) for k in gone]
        for e in dropped:
            shutil.rmtree(e.path, ignore_errors=True)
        if dropped:
            log.info("memory stage: %d staged image(s) dropped (age or size)", len(dropped))
