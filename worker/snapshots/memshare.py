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
  that failed is not linked: the restore assembles the file itself;
- the node that checkpoints a fork's source *offers* the checkpoint's own files
  (``offer``): hard-linked into this process's directory as they were chunked,
  and held there for ``keep_s``, so the forks restored on that node link them
  instead of assembling them from its chunk cache (reading, hashing and writing
  the whole image again, ~0.9 s for 190 MB).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
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
    """The image files this node's restores are assembling or have assembled.

    Args:
        root: this process's own directory for offered files (made; emptied
            first), or None: nothing is offered.
        keep_s: how long an offered file is held.
    """

    def __init__(self, root: Path | None = None, keep_s: float = 120.0) -> None:
        self._lock = threading.Lock()
        self._files: dict[tuple[str, str], Ticket] = {}
        self.root, self.keep_s = root, keep_s
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True, mode=0o700)

    def offer(self, tenant: str, files: Mapping[str, Sequence[Chunk]], image: Path) -> bool:
        """Hold ``image``'s files (a checkpoint this node made and cut into ``files``'
        chunks, of ``tenant``) as assembled copies for ``keep_s``: hard-linked here,
        so the checkpoint's directory may go. False when nothing is offered (no
        root, or a link failed: the restores assemble their files as before)."""
        if self.root is None:
            return False
        held = Path(tempfile.mkdtemp(dir=self.root))
        try:
            for name in files:
                os.link(image / name, held / name)
        except OSError:
            shutil.rmtree(held, ignore_errors=True)
            return False
        with self._lock:
            for name, chunks in files.items():
                ticket = Ticket()
                ticket.finish(held / name)
                self._files[(tenant, _identity(name, chunks))] = ticket
        timer = threading.Timer(self.keep_s, shutil.rmtree, (held,), {"ignore_errors": True})
        timer.daemon = True
        timer.start()
        return True

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
