"""Objects in MinIO (or any S3), through the ``minio`` SDK.

One bucket shared by every tenant (each
tenant's keys start with ``t/<tenant>/``), created on first use if missing.
Configured by ``SANDGRID_MINIO__ENDPOINT``, ``__ACCESS_KEY``, ``__SECRET_KEY``,
``__BUCKET`` and ``__SECURE``.

Connections: one urllib3 pool sized for the transfer threads, a short connect
timeout and two quick retries, so that a stopped MinIO is reported within about
a second as ``InfrastructureError`` (``store_unavailable``) instead of after
the SDK's default minutes. urllib3 discards a connection that failed and the
bucket check is remembered only once it succeeded, so the store works again as
soon as MinIO is back; nothing needs restarting.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from sandgrid.errors import ErrorCode, InfrastructureError
from sandgrid.wire.settings import DEFAULT_SNAPSHOT_THREADS

try:
    import urllib3
    from minio import Minio
    from minio.deleteobjects import DeleteError, DeleteObject
    from minio.error import MinioException, S3Error
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the MinIO snapshot store needs the `minio` package: pip install 'minio>=7.2' "
        "(or set SANDGRID_WORKER__SNAPSHOT_STORE=local)"
    ) from exc

from sandgrid.wire.objects.base import ObjectStore, StoreConflict

__all__ = [
    "CONNECT_TIMEOUT_S",
    "READ_TIMEOUT_S",
    "MinioObjects",
]

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 120.0
_SINGLE_PUT_MAX = 5 << 30  # S3's largest single PUT: no multipart for our blobs
_MISSING = frozenset({"NoSuchKey", "NoSuchObject", "ResourceNotFound"})
_CONFLICT = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_UNSIGNED = "UNSIGNED-PAYLOAD"
_DELETE_MAX = 1000  # S3's most keys in one multi-object delete
T = TypeVar("T")


class _Client(Minio):
    """The SDK's client, except that a request naming ``UNSIGNED-PAYLOAD`` as its
    ``x-amz-content-sha256`` keeps it: over plain HTTP the SDK hashes every body
    for its signature (and MinIO hashes it again to check it), which a
    content-addressed object does not need (``put_addressed``). Over HTTPS the
    SDK sends every payload unsigned, with a ``Content-MD5`` of it; an addressed
    object goes without that too. The signature still covers the request's
    method, key and headers."""

    def _build_headers(  # type: ignore[no-untyped-def]  # the SDK's own signature
        self, host, headers=None, body=None, creds=None
    ):
        if not headers or headers.get("x-amz-content-sha256") != _UNSIGNED:
            return super()._build_headers(host, headers, body, creds)
        built, date = super()._build_headers(host, headers, None, creds)
        built["x-amz-content-sha256"] = _UNSIGNED
        if body:
            built["Content-Length"] = str(len(body))
        return built, date


class MinioObjects(ObjectStore):
    """Objects in a MinIO bucket (see the module doc).

    Args:
        endpoint: ``host:port`` of MinIO.
        access_key: its access key.
        secret_key: its secret key.
        bucket: the bucket; created if missing.
        secure: HTTPS.
        connections: the connection pool's size (the snapshot store's threads, and a few).
    """

    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        *,
        secure: bool = False,
        connections: int = DEFAULT_SNAPSHOT_THREADS + 4,
    ) -> None:
        self.bucket = bucket
        self.location = f"MinIO {endpoint}, bucket {bucket}"
        http = urllib3.PoolManager(
            maxsize=connections,
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
            retries=urllib3.Retry(
                total=2, backoff_factor=0.1, status_forcelist=(500, 502, 503, 504)
            ),
        )
        self._client = _Client(
            endpoint, access_key=access_key, secret_key=secret_key, secure=secure, http_client=http
        )
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()

    def _call(self, op: str, fn: Callable[[], T]) -> T:
        """Run one SDK call with the bucket in place; missing keys become ``KeyError``,
        everything else that is the store's fault ``store_unavailable``."""
        try:
            self._ensure_bucket()
            return fn()
        except S3Error as exc:
            if exc.code in _MISSING:
                raise KeyError(exc.code) from None
            if exc.code == "NoSuchBucket":
                self._bucket_ready = False
            raise self._unavailable(op, f"{exc.code}: {exc.message}", exc) from exc
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._unavailable(op, f"{type(exc).__name__}: {exc}", exc) from exc

    def _unavailable(self, op: str, why: str, exc: BaseException) -> InfrastructureError:
        return InfrastructureError(
            f"snapshot store {self.location} is unavailable ({op}): {why}; is MinIO running?",
            code=ErrorCode.STORE_UNAVAILABLE,
            operation=f"snapshot.{op}",
            context={"store": self.location},
            retryable=True,
        )

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        with self._bucket_lock:
            if self._bucket_ready:
                return
            if not self._client.bucket_exists(self.bucket):
                try:
                    self._client.make_bucket(self.bucket)
                except S3Error as exc:
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
            self._bucket_ready = True

    def put(self, key: str, data: bytes) -> None:
        self._call(
            "write",
            lambda: self._client.put_object(
                self.bucket, key, io.BytesIO(data), len(data), part_size=_SINGLE_PUT_MAX
            ),
        )

    def put_addressed(self, key: str, data: bytes) -> None:
        """``put`` with an unsigned payload (``_Client``): the body is hashed
        neither here nor by MinIO; every reader checks it against its key."""
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": "application/octet-stream",
            "x-amz-content-sha256": _UNSIGNED,
        }
        self._call("write", lambda: self._client._put_object(self.bucket, key, data, headers, None))

    def get(self, key: str) -> bytes:
        def get() -> bytes:
            response = self._client.get_object(self.bucket, key)
            try:
                return bytes(response.read())
            finally:
                response.close()
                response.release_conn()

        return self._call("read", get)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        def get() -> tuple[bytes, str]:
            response = self._client.get_object(self.bucket, key)
            try:
                return bytes(response.read()), str(response.headers.get("ETag", ""))
            finally:
                response.close()
                response.release_conn()

        return self._call("read", get)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        """A PUT with ``If-Match: tag`` (``If-None-Match: *`` for None): S3's
        conditional write, which MinIO checks and applies atomically. The SDK's
        ``put_object`` would send these headers as user metadata, hence its
        internal ``_put_object`` (tests/integration/test_snapshot_store_minio.py
        holds it to the server's behaviour)."""
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": "application/octet-stream",
            **({"If-None-Match": "*"} if tag is None else {"If-Match": tag}),
        }
        try:
            written = self._call(
                "write", lambda: self._client._put_object(self.bucket, key, data, headers, None)
            )
        except InfrastructureError as exc:
            cause = exc.__cause__
            if isinstance(cause, S3Error) and cause.code in _CONFLICT:
                raise StoreConflict(key) from None
            raise
        return f'"{written.etag}"' if written.etag else None  # the SDK strips the quotes

    def mtime(self, key: str) -> float | None:
        try:
            stat = self._call("stat", lambda: self._client.stat_object(self.bucket, key))
        except KeyError:
            return None
        if stat.last_modified is None:  # an age is what gc needs: never guess one
            raise self._unavailable("stat", f"no Last-Modified for {key}", ValueError(key))
        return stat.last_modified.timestamp()

    def list(self, prefix: str) -> list[str]:
        return self._call(
            "list",
            lambda: [
                str(o.object_name)
                for o in self._client.list_objects(self.bucket, prefix=prefix, recursive=True)
            ],
        )

    def delete(self, key: str) -> None:
        self._call("delete", lambda: self._client.remove_object(self.bucket, key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """S3's multi-object delete: one request per ``_DELETE_MAX`` keys. A key
        the store could not delete fails the call (absent is not an error)."""
        for at in range(0, len(keys), _DELETE_MAX):
            batch = [DeleteObject(k) for k in keys[at : at + _DELETE_MAX]]
            failed = self._call("delete", partial(self._remove_objects, batch))
            if failed:
                why = f"{len(failed)} of {len(batch)} keys not deleted ({failed[0].code})"
                raise self._unavailable("delete", why, RuntimeError(why))

    def _remove_objects(self, batch: Sequence[DeleteObject]) -> tuple[DeleteError, ...]:
        """One multi-object delete (the SDK sends it as its answer is read)."""
        return tuple(self._client.remove_objects(self.bucket, batch))

    def drop_bucket(self) -> None:
        """Delete every object and the bucket itself (tests and benchmarks only)."""
        for key in self.list(""):
            self.delete(key)
        self._call("delete", lambda: self._client.remove_bucket(self.bucket))
        self._bucket_ready = False
