"""The ``ObjectStore`` contract: one suite, subclassed once per implementation.

As kombu's ``t/integration/common.py``: a subclass provides the ``objects``
fixture (a fresh, empty store; removed afterwards) and inherits every test.
``LocalObjects`` runs it in the unit tests, ``MinioObjects`` against the real
MinIO in the integration tests.
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from sandgrid.wire.objects import ObjectStore, StoreConflict

__all__ = ["ObjectStoreContract"]

TENANT, OTHER = "acme", "globex"


class ObjectStoreContract:
    """The promises of ``sandgrid.wire.objects.base`` (see its module doc)."""

    @pytest.fixture
    def objects(self) -> ObjectStore:
        raise NotImplementedError("a subclass provides a fresh store")

    def test_primitives(self, objects: ObjectStore) -> None:
        key = f"t/{TENANT}/blobs/" + "a" * 64
        with pytest.raises(KeyError):
            objects.get(key)
        assert not objects.exists(key) and objects.mtime(key) is None
        objects.put(key, b"one")
        objects.put(key, b"two")
        assert objects.get(key) == b"two" and objects.exists(key)
        mtime = objects.mtime(key)
        assert mtime is not None and abs(mtime - time.time()) < 60
        objects.put(f"t/{TENANT}/s/s1/latest", b"x")
        assert sorted(objects.list(f"t/{TENANT}/blobs/")) == [key]
        assert len(objects.list(f"t/{TENANT}/")) == 2 and objects.list(f"t/{OTHER}/") == []
        objects.delete(key)
        objects.delete(key)  # absent: not an error
        assert not objects.exists(key)

    def test_delete_many_removes_each_key_and_absent_ones_are_no_error(
        self, objects: ObjectStore
    ) -> None:
        gone = [f"t/{TENANT}/s/s1/snap/{i:012d}-aaaaaaaaaaaa" for i in range(5)]
        kept = f"t/{TENANT}/s/s1/snap/{9:012d}-aaaaaaaaaaaa"
        for key in [*gone, kept]:
            objects.put(key, b"m")
        objects.delete_many([*gone, f"t/{TENANT}/s/s1/snap/never-there"])
        objects.delete_many([])
        assert objects.list(f"t/{TENANT}/") == [kept]

    def test_a_conditional_write_is_checked_by_the_store(self, objects: ObjectStore) -> None:
        key = f"t/{TENANT}/s/cas/latest"
        objects.put_if(key, b"one", None)
        with pytest.raises(StoreConflict):
            objects.put_if(key, b"two", None)  # it exists now
        data, tag = objects.get_tagged(key)
        assert data == b"one"
        with pytest.raises(StoreConflict):
            objects.put_if(key, b"three", "0" * 32)
        written = objects.put_if(key, b"four", tag)
        assert objects.get(key) == b"four"
        with pytest.raises(StoreConflict):
            objects.put_if(key, b"five", tag)  # that version is gone
        assert written in (None, objects.get_tagged(key)[1])  # the tag, when told
        if written is not None:
            objects.put_if(key, b"six", written)  # good for the next write, unread
            assert objects.get(key) == b"six"
        objects.delete(key)

    def test_a_missing_key_has_no_tag(self, objects: ObjectStore) -> None:
        with pytest.raises(KeyError):
            objects.get_tagged(f"t/{TENANT}/s/none/latest")

    def test_a_tag_names_the_bytes_not_the_key(self, objects: ObjectStore) -> None:
        key = f"t/{TENANT}/s/tags/latest"
        objects.put(key, b"one")
        _, first = objects.get_tagged(key)
        objects.put(key, b"two")
        _, second = objects.get_tagged(key)
        assert first != second
        with pytest.raises(StoreConflict):
            objects.put_if(key, b"three", first)
        assert objects.get(key) == b"two"

    def test_one_of_racing_conditional_writes_wins(self, objects: ObjectStore) -> None:
        key = f"t/{TENANT}/s/race/latest"
        won: list[int] = []
        lost: list[int] = []
        start = threading.Barrier(8)

        def write(i: int) -> None:
            start.wait()
            try:
                objects.put_if(key, str(i).encode(), None)
                won.append(i)
            except StoreConflict:
                lost.append(i)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(lost) == 7
        assert objects.get(key) == str(won[0]).encode()

    def test_bytes_survive_as_they_were(self, objects: ObjectStore) -> None:
        data = bytes(range(256)) * 4096  # 1 MiB, every byte value
        objects.put(f"t/{TENANT}/blobs/big", data)
        assert objects.get(f"t/{TENANT}/blobs/big") == data
        objects.put(f"t/{TENANT}/blobs/empty", b"")
        assert objects.get(f"t/{TENANT}/blobs/empty") == b""

    def test_an_addressed_write_keeps_its_bytes(self, objects: ObjectStore) -> None:
        data = bytes(range(256)) * 4096
        key = f"t/{TENANT}/blobs/" + hashlib.sha256(data).hexdigest()
        objects.put_addressed(key, data)
        objects.put_addressed(key, data)  # the same content again: harmless
        assert objects.get(key) == data
        objects.put_addressed(f"t/{TENANT}/blobs/empty", b"")
        assert objects.get(f"t/{TENANT}/blobs/empty") == b""
