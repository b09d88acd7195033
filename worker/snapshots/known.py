"""This process's memory of contents already stored (``KnownBlobs``).

It spares the store a HEAD request, and the sandbox an upload, for content
seen before; ``catalog.Catalog`` holds one per store, ``transfer`` consults
and fills it, ``lifecycle`` forgets what it collects.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from worker.snapshots.format.manifest import Location

__all__ = ["KnownBlobs"]


class _Known(NamedTuple):
    location: Location
    blob_size: int
    stamp: float


class KnownBlobs:
    """This process's memory of contents already stored, per tenant.

    It spares a HEAD request (and an upload) for content seen before. An entry
    is trusted only while its stamp (when the blob was last written, by the
    store's clock as far as we know) is younger than ``fresh_s``: garbage
    collection deletes an unreferenced blob only once it is older than twice
    that, so a snapshot that reuses a fresh entry cannot lose the blob before
    its manifest names it (see ``SnapshotStore.gc``).
    """

    def __init__(self, fresh_s: float, max_entries: int = 200_000) -> None:
        self.fresh_s = fresh_s
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], _Known] = OrderedDict()

    def get(self, tenant: str, sha256: str, now: float | None = None) -> _Known | None:
        now = time.time() if now is None else now
        with self._lock:
            hit = self._items.get((tenant, sha256))
            if hit is None or hit.stamp < now - self.fresh_s:
                return None
            self._items.move_to_end((tenant, sha256))
            return hit

    def put(
        self, tenant: str, sha256: str, location: Location, blob_size: int, stamp: float
    ) -> None:
        with self._lock:
            self._items[(tenant, sha256)] = _Known(location, blob_size, stamp)
            self._items.move_to_end((tenant, sha256))
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def forget(self, tenant: str, blobs: Iterable[str]) -> None:
        """Drop every entry that lives in these blobs (after GC deleted them)."""
        gone = set(blobs)
        with self._lock:
            for key in [
                k for k, v in self._items.items() if k[0] == tenant and v.location.blob in gone
            ]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
