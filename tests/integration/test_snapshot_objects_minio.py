"""``MinioObjects`` against the ``ObjectStore`` contract, on the real MinIO.

A bucket of its own per test, removed at the end. MinIO missing is a skip on a
developer's machine and a failure in CI (see test_snapshot_store_minio.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sandgrid.wire.objects import ObjectStore
from tests.integration.test_snapshot_store_minio import SETTINGS, minio_ready, require_minio
from tests.support.object_store_contract import ObjectStoreContract

pytestmark = pytest.mark.integration


class TestMinioObjects(ObjectStoreContract):
    @pytest.fixture
    def objects(self) -> Iterator[ObjectStore]:
        require_minio()
        from sandgrid.wire.objects.minio import MinioObjects

        s = SETTINGS
        bucket = f"sgtest-{uuid.uuid4().hex[:12]}"
        made = MinioObjects(s.endpoint, s.access_key, s.secret_key, bucket, secure=s.secure)
        yield made
        if minio_ready():
            made.drop_bucket()
        made.close()
