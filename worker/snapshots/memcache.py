"""A node's cache of unpacked memory chunks: N forks restored here fetch each chunk once.

Forks of one session (24.2) restore images that share every chunk; without a
cache, each of the forks a node restores downloads, verifies and unpacks the
same pieces, at the same moment, on the same cores (docs/memory.md,
"Measured"). ``ChunkCache`` keeps a chunk's unpacked bytes on the node's disk
once it was fetched and verified from the store, so the next restore here
reads them instead:

- keyed by the tenant and the chunk's name (the hash of its stored bytes): a
  chunk of one tenant is never handed to another, whatever its bytes;
- verified on every hit: the cache records the sha256 of the unpacked bytes it
  wrote (in this process's memory, not on the disk beside them) and a hit
  whose bytes no longer hash to it, or are not the length the manifest says,
  is dropped and fetched from the store again;
- bounded: at most ``max_bytes`` on disk, the least recently used chunk
  evicted first; a chunk larger than the bound is not kept;
- one fetch at a time per chunk: restores that want a chunk another is
  fetching wait for it rather than fetch it too (four forks at once).

The directory is the node process's own (``img-<pid>-cache`` in the image
scratch root): a node that starts removes what a dead one left
(``worker.turns.memory.collect_scratch``), and an entry it finds there that
its index does not hold is never trusted.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from sandgrid.wire.objects import keys
from worker.snapshots.memchunks import Chunk

__all__ = ["STATS", "ChunkCache"]

STATS = ("hits", "fetched", "kept", "refused", "evicted")
"""The counters of ``ChunkCache.stats``: chunks read from the cache (verified), fetched
from the store (a miss or a refused entry), kept from this node's own checkpoint (a
fork's source), entries refused (their bytes no longer verified: dropped and fetched
again), entries evicted to keep within the bound."""


@dataclass
class _Pending:
    """A chunk on its way in: its bytes, once fetched, until its file is written."""

    done: threading.Event = field(default_factory=threading.Event)
    raw: bytes | None = None


@dataclass(frozen=True)
class _Entry:
    digest: str
    """sha256 of the unpacked bytes as written."""
    size: int


class ChunkCache:
    """Unpacked chunks on this node's disk, per tenant, verified, bounded (LRU).

    Args:
        root: the cache's own directory (made if missing; emptied: entries of an
            earlier process are not known to this one's index).
        max_bytes: the most it holds on disk.
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.max_bytes = max_bytes
        self.stats: Counter[str] = Counter(dict.fromkeys(STATS, 0))
        """What the cache did since the node started (``STATS``; the log of each restore)."""
        self._lock = threading.Lock()
        self._index: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._bytes = 0
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="memcache")
        """Entries are written behind the restores: the bytes are handed on from memory
        until their file is on disk, so no restore waits for the cache's disk."""

    @property
    def size(self) -> int:
        """Bytes held on disk now."""
        return self._bytes

    def flush(self) -> None:
        """Wait until every entry handed to the writer is on disk (or given up)."""
        self._writer.submit(lambda: None).result()

    def get(self, tenant: str, chunk: Chunk, fetch: Callable[[], bytes]) -> bytes:
        """The unpacked bytes of ``tenant``'s ``chunk``: from the cache when a verified
        entry is here, else from ``fetch`` (which verifies them against the store's
        name), kept for the next restore.

        Raises:
            Whatever ``fetch`` raises (the chunk is then not cached).
        """
        key = (keys.check_id("tenant", tenant), chunk.sha256)
        while True:
            with self._lock:
                entry, pending = self._index.get(key), self._pending.get(key)
                if entry is not None:
                    self._index.move_to_end(key)
                    break
                if pending is None:
                    mine = self._pending[key] = _Pending()
                    break
            pending.done.wait()  # another restore fetches it: take its copy when done
            if pending.raw is not None and len(pending.raw) == chunk.raw:
                with self._lock:
                    self.stats["hits"] += 1
                return pending.raw
        if entry is not None:
            raw = self._read(key, entry, chunk.raw)
            if raw is not None:
                return raw
            return self.get(tenant, chunk, fetch)  # dropped: fetched again (once)
        try:
            raw = fetch()
        except BaseException:
            with self._lock:
                self._pending.pop(key).done.set()
            raise
        with self._lock:
            self.stats["fetched"] += 1
        self._hand_on(key, mine, raw)
        return raw

    def keep(self, tenant: str, chunk: Chunk, raw: bytes) -> None:
        """Hold ``raw`` as ``tenant``'s ``chunk``, which this node just packed and named
        from its own checkpoint (a fork's source: its forks restored here fetch
        nothing); a chunk held or being fetched already is left as it is."""
        key = (keys.check_id("tenant", tenant), chunk.sha256)
        with self._lock:
            if key in self._index or key in self._pending:
                return
            mine = self._pending[key] = _Pending()
            self.stats["kept"] += 1
        self._hand_on(key, mine, raw)

    def _hand_on(self, key: tuple[str, str], pending: _Pending, raw: bytes) -> None:
        """Give ``raw`` to the restores waiting for it now, and to the writer."""
        pending.raw = raw
        pending.done.set()
        self._writer.submit(self._settle, key, raw)

    def _settle(self, key: tuple[str, str], raw: bytes) -> None:
        try:
            self._put(key, raw)
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _path(self, key: tuple[str, str]) -> Path:
        return self.root / key[0] / key[1]

    def _read(self, key: tuple[str, str], entry: _Entry, raw_len: int) -> bytes | None:
        """The entry's bytes if they still verify; else it is dropped (None)."""
        try:
            raw = self._path(key).read_bytes()
        except OSError:
            raw = b""
        if len(raw) == raw_len == entry.size and hashlib.sha256(raw).hexdigest() == entry.digest:
            with self._lock:
                self.stats["hits"] += 1
            return raw
        with self._lock:
            self.stats["refused"] += 1
            self._drop(key)
        return None

    def _put(self, key: tuple[str, str], raw: bytes) -> None:
        if len(raw) > self.max_bytes:
            return
        entry = _Entry(hashlib.sha256(raw).hexdigest(), len(raw))
        path = self._path(key)  # not in the index: only its one writer writes it
        path.parent.mkdir(exist_ok=True)
        part = path.with_name(f".{path.name}.{threading.get_ident()}")
        try:
            part.write_bytes(raw)
            os.replace(part, path)
        except OSError:  # a full disk costs the cache, never the restore
            part.unlink(missing_ok=True)
            return
        with self._lock:
            self._index[key] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._index)))
                self.stats["evicted"] += 1

    def _drop(self, key: tuple[str, str]) -> None:
        """Forget ``key`` and delete its file (the lock is held)."""
        entry = self._index.pop(key, None)
        if entry is None:
            return
        self._bytes -= entry.size
        self._path(key).unlink(missing_ok=True)
