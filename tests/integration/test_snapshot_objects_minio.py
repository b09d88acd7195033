"""``MinioObjects`` against the ``ObjectStore`` contract, on the real MinIO.

A bucket of its own per test, removed at the end. MinIO missing is a skip on a
developer's machine and a failure in CI (see test_snapshot_store_minio.py).
"""

from __future__ import annotations

import hashlib
import io
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


def test_an_addressed_write_sends_its_body_unsigned_and_others_stay_signed() -> None:
    """Over plain HTTP the SDK hashes each body into its signature; a content-addressed
    object skips that (its readers check its hash), every other write keeps it."""
    require_minio()
    from sandgrid.wire.objects.minio import MinioObjects

    s = SETTINGS
    made = MinioObjects(
        s.endpoint, s.access_key, s.secret_key, f"sgtest-{uuid.uuid4().hex[:12]}", secure=False
    )
    trace = io.StringIO()
    data = b"addressed" * 1000
    try:
        made.put("t/acme/s/s1/latest", b"record")  # the bucket is made before the trace
        made._client.trace_on(trace)
        made.put_addressed("t/acme/blobs/" + hashlib.sha256(data).hexdigest(), data)
        addressed, trace = trace.getvalue(), io.StringIO()
        made._client.trace_on(trace)
        made.put("t/acme/s/s1/latest", b"record two")
        signed = trace.getvalue()
        made._client.trace_off()
        assert "x-amz-content-sha256: unsigned-payload" in addressed.lower()
        assert f"x-amz-content-sha256: {hashlib.sha256(b'record two').hexdigest()}" in (
            signed.lower()
        )
        assert made.get("t/acme/blobs/" + hashlib.sha256(data).hexdigest()) == data
    finally:
        made.drop_bucket()
        made.close()


def test_delete_many_sends_one_request_per_batch_of_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3's multi-object delete: five keys at two a request are three requests, not five."""
    require_minio()
    from sandgrid.wire.objects import minio as minio_objects

    s = SETTINGS
    made = minio_objects.MinioObjects(
        s.endpoint, s.access_key, s.secret_key, f"sgtest-{uuid.uuid4().hex[:12]}", secure=False
    )
    keys = [f"t/acme/s/s1/snap/{i:012d}-aaaaaaaaaaaa" for i in range(5)]
    try:
        for key in keys:
            made.put(key, b"m")
        monkeypatch.setattr(minio_objects, "_DELETE_MAX", 2)
        trace = io.StringIO()
        made._client.trace_on(trace)
        made.delete_many(keys)
        made._client.trace_off()
        assert trace.getvalue().count("POST /") == 3
        assert "DELETE /" not in trace.getvalue()
        assert made.list("t/acme/") == []
    finally:
        made.drop_bucket()
        made.close()
