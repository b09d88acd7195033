"""``LocalObjects`` against the ``ObjectStore`` contract, and what only it promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgrid.errors import InvalidInput
from sandgrid.wire.objects import LocalObjects, ObjectStore
from tests.support.object_store_contract import ObjectStoreContract


class TestLocalObjects(ObjectStoreContract):
    @pytest.fixture
    def objects(self, tmp_path: Path) -> ObjectStore:
        return LocalObjects(tmp_path / "objects")

    def test_keys_cannot_leave_the_directory(self, objects: ObjectStore) -> None:
        for key in ("/etc/passwd", "a/../b", "a//b", ".hidden", "a/.lock"):
            with pytest.raises(InvalidInput, match="bad store key"):
                objects.put(key, b"x")

    def test_listing_skips_the_writes_in_flight(self, tmp_path: Path) -> None:
        objects = LocalObjects(tmp_path / "objects")
        objects.put_if("t/acme/s/s1/latest", b"x", None)  # leaves a hidden lock file
        (tmp_path / "objects/t/acme/s/s1/.latest.1234.tmp").write_bytes(b"half")
        assert objects.list("t/") == ["t/acme/s/s1/latest"]
