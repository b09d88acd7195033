"""The object-store interface under the snapshot store: eight primitives, no algorithm.

``worker.snapshots.store.SnapshotStore`` owns everything snapshots mean
(manifests, the pointer, retention, collection); it reaches storage only
through an ``ObjectStore`` handed to it, so a new storage is one class here
(``local``: a directory; ``minio``: any S3). Keys are ``/``-separated strings
(``sandgrid.wire.objects.keys`` spells them); values are bytes.

Every implementation keeps the same promises, held by one contract suite
(tests/support/object_store_contract.py, run against each): a write is atomic
(a reader sees the old value or the new one), a missing key is ``KeyError``
on read and not an error on delete, a conditional write (``put_if``) is
checked and applied atomically and raises ``StoreConflict`` when it loses,
and a failure of the storage itself is ``InfrastructureError``
(``store_unavailable``), after which the object keeps no broken connection:
the next call can succeed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

__all__ = ["ObjectStore", "StoreConflict"]


class StoreConflict(Exception):
    """A conditional write (``ObjectStore.put_if``) found another version than the
    one it was based on; nothing was written."""


class ObjectStore(ABC):
    """A flat namespace of byte objects (see the module doc for the promises).

    Attributes:
        location: where the objects live, for error messages and logs.
    """

    location: str = "?"

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (readers see all of it or the old one).

        Raises:
            InfrastructureError: ``store_unavailable``.
        """

    def put_addressed(self, key: str, data: bytes) -> None:
        """``put`` of an object whose key names the hash of its bytes, which every
        reader checks (a blob, a memory chunk): a store may skip its own check of
        the body in transit, since a changed body is caught at the read.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        self.put(key, data)

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes under ``key``.

        Raises:
            KeyError: there are none.
            InfrastructureError: ``store_unavailable``.
        """

    @abstractmethod
    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """The bytes under ``key`` and a tag of this version of them (an ETag), for
        a later ``put_if``.

        Raises:
            KeyError: there are none.
            InfrastructureError: ``store_unavailable``.
        """

    @abstractmethod
    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        """``put``, only if the version under ``key`` still has ``tag`` (None: only
        if there is none). This is what keeps two workers from both advancing a
        session's pointer.

        Returns:
            The tag of the version written, as ``get_tagged`` would give it, when
            the store tells it (None otherwise): a writer that keeps it can write
            again without reading first.

        Raises:
            StoreConflict: another version is there; nothing was written.
            InfrastructureError: ``store_unavailable``.
        """

    @abstractmethod
    def mtime(self, key: str) -> float | None:
        """When ``key`` was last written (epoch seconds, the store's clock), None if
        absent: garbage collection decides on these ages.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, in any order.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; absent is not an error.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each of ``keys``; absent is not an error. The default deletes
        them one by one; a store with a batch request overrides it.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        for key in keys:
            self.delete(key)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds an object (one ``mtime`` request)."""
        return self.mtime(key) is not None

    def close(self) -> None:  # noqa: B027 - an optional hook, not a primitive
        """Release connections; the default holds none."""
