"""Image files shared by the restores of one node: a fork's copies land as one file.

Forks of one session restore images whose files are the same chunks in the same
order (24.2); four of them restoring on one node at once each wrote the same
190 MB ``pages.img`` into its own scratch directory, from the node's cache
(``worker.snapshots.memcache``): reading, verifying and writing 760 MB on two
cores, seconds before any of them could start (docs/memory.md, "Measured").
``SharedFiles`` lets the first restore of a file assemble it and the others
hard-link that copy into their own scratch directory instead (``runsc restore``
only reads its image):

- keyed by the tenant and the file's exact chunks (names and lengths, in order):
  a file of one tenant is never linked for another, nor one of other contents;
- the copy is the one a restore of this node assembled moments before from
  verified chunks, in the node's own scratch root, exactly as if it had
  assembled it itself;
- a copy that is gone (its restore ended and removed its scratch directory) or
  that failed is not linked: the restore assembles the file itself.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from worker.snapshots.memchunks import Chunk

__all__ = ["SharedFiles", "Ticket"]

_KEEP = 256
"""Entries past this many are dropped once their copy is gone (a node's recent forks)."""


@dataclass
class Ticket:
    """A file of the node's restores: being assembled by one of them, or assembled."""

    done: threading.Event = field(default_factory=threading.Event)
    path: Path | None = None
    """The assembled copy, once done (None: it failed)."""

    def finish(self, path: Path | None) -> None:
        """The owner is done: ``path`` holds the file whole, or None when it failed."""
        self.path = path
        self.done.set()

    def link(self, dest: Path) -> bool:
        """Wait for the owner, then hard-link its copy as ``dest``; False when there is
        no copy to link (failed, or gone already): assemble it then."""
        self.done.wait()
        if self.path is None:
            return False
        try:
            os.link(self.path, dest)
        except OSError:
            return False
        return True


class SharedFiles:
    """The image files this node's restores are assembling or have assembled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[tuple[str, str], Ticket] = {}

    def claim(self, tenant: str, name: str, chunks: Sequence[Chunk]) -> tuple[bool, Ticket]:
        """The file ``name`` made of ``chunks`` of ``tenant``: True and a new ticket when
        this restore is to assemble it (no other restore of the node holds a copy or
        is making one: ``finish`` it), else False and the holder's ticket (``link``)."""
        key = (tenant, _identity(name, chunks))
        with self._lock:
            held = self._files.get(key)
            if held is not None and (not held.done.is_set() or _exists(held.path)):
                return False, held
            mine = self._files[key] = Ticket()
            if len(self._files) > _KEEP:
                for old, ticket in list(self._files.items()):
                    if ticket.done.is_set() and not _exists(ticket.path):
                        del self._files[old]
            return True, mine


def _exists(path: Path | None) -> bool:
    return path is not None and path.exists()


def _identity(name: str, chunks: Sequence[Chunk]) -> str:
    rows = "\n".join(f"{c.sha256} {c.stored} {c.raw}" for c in chunks)
    return hashlib.sha256(f"{name}\n{rows}".encode()).hexdigest()
