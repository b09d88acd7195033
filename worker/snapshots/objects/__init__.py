"""Object stores: where snapshot bytes live (``base``), a directory (``local``), MinIO (``minio``).

``minio`` needs the ``minio`` SDK and is imported only by whoever uses it.
"""

from __future__ import annotations

from worker.snapshots.objects.base import ObjectStore, StoreConflict
from worker.snapshots.objects.local import LocalObjects

__all__ = ["LocalObjects", "ObjectStore", "StoreConflict"]
