"""The snapshot store against its real object stores: one suite for MinIO and local.

The object stores' own contract is tests/support/object_store_contract.py
(test_snapshot_objects_minio.py, tests/unit/worker/snapshots/test_objects_local.py).

MinIO is the server that ``deploy/local/minio.sh`` runs on loopback. It missing
is a skip on a developer's machine and a *failure* in CI (``CI=true``). Each
test gets a bucket of its own (MinIO) or a directory (local), removed at the
end. One test stops MinIO (via its pid file) in the middle of a snapshot and
starts it again with ``deploy/local/minio.sh``, whatever happens.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InfrastructureError, InvalidInput, NotFound, SnapshotError
from sandgrid.wire.objects import keys as store_keys
from sandgrid.wire.settings import Settings
from tests.support.hostdir import HostDirBackend
from tests.support.snapshot_stores import local_store, minio_store
from worker.snapshots import SnapshotStore, restore_sandbox, snapshot_sandbox
from worker.snapshots import sync as sync_mod
from worker.snapshots.format.blobs import decode, encode

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MINIO_SH = REPO / "deploy" / "local" / "minio.sh"
PID_FILE = Path(os.environ.get("SANDGRID_RUN_DIR", "/var/lib/sandgrid/run")) / "minio.pid"
SETTINGS = Settings().minio  # SANDGRID_MINIO__* as deploy/local/minio.sh uses them
TENANT, OTHER = "acme", "globex"
LATER = 3600.0


def minio_ready(timeout: float = 2.0) -> bool:
    try:
        url = f"http://{SETTINGS.endpoint}/minio/health/ready"
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def require_minio() -> None:
    if minio_ready():
        return
    reason = f"MinIO is not running on {SETTINGS.endpoint} (deploy/local/minio.sh starts it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"MinIO missing in CI: {reason}")
    pytest.skip(reason)


def make_minio(**options: Any) -> SnapshotStore:

    bucket = f"sgtest-{uuid.uuid4().hex[:12]}"
    s = SETTINGS
    return minio_store(s.endpoint, s.access_key, s.secret_key, bucket, secure=s.secure, **options)


@pytest.fixture(params=["minio", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SnapshotStore]:
    options: dict[str, Any] = {"keep": 2, "gc_grace_s": 600.0, "threads": 8}
    options["small_file_bytes"] = 16 << 10
    if request.param == "minio":
        require_minio()
        made = make_minio(**options)
    else:
        made = local_store(tmp_path / "store", **options)
    yield made
    made.settle()  # what it stores after a snapshot's answer (a fold-out) lands first
    if request.param == "minio" and minio_ready():
        made.objects.drop_bucket()  # type: ignore[attr-defined]
    made.close()


def sandbox(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    (path / "workspace").mkdir(parents=True)
    (path / "home/sandbox").mkdir(parents=True)
    return path


def fill(sbx: Path) -> None:
    (sbx / "workspace/src").mkdir()
    for i in range(40):
        (sbx / f"workspace/src/m{i}.py").write_text(f"VALUE = {i}\n" * 20)
    (sbx / "workspace/data.bin").write_bytes(os.urandom(200_000))
    (sbx / "workspace/run.sh").write_text("#!/bin/sh\n")
    (sbx / "workspace/run.sh").chmod(0o755)
    os.symlink("src/m1.py", sbx / "workspace/link")
    (sbx / "home/sandbox/.profile").write_text("export A=1\n")


def listing(sbx: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in sorted(sbx.rglob("*")):
        rel = str(p.relative_to(sbx))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", p.stat().st_mode & 0o777)
        else:
            out[rel] = ("file", p.stat().st_mode & 0o777, p.read_bytes())
    return out


def count_calls(store: SnapshotStore) -> Counter[str]:
    """Count the store's primitive calls from now on (instance-level wrappers); a
    primitive that another one calls (``put_addressed``'s default ``put``) is not
    counted twice."""
    calls: Counter[str] = Counter()
    inside = threading.local()
    primitives = ("put", "put_addressed", "put_if", "get", "get_tagged", "exists", "mtime")
    for name in (*primitives, "list", "delete"):
        original = getattr(store.objects, name)

        def wrapper(*a: Any, _n: str = name, _o: Callable[..., Any] = original) -> Any:
            if getattr(inside, "call", None) is not None:
                return _o(*a)
            calls[_n] += 1
            inside.call = _n
            try:
                return _o(*a)
            finally:
                inside.call = None

        setattr(store.objects, name, wrapper)
    return calls


def take(store: SnapshotStore, sbx: Path, session: str = "s1", tenant: str = TENANT) -> Any:
    ref = snapshot_sandbox(HostDirBackend(), sbx, store, tenant, session, None)
    assert ref is not None
    return ref


# ---- the contract -------------------------------------------------------------------


def test_snapshot_and_restore_round_trip(store: SnapshotStore, tmp_path: Path) -> None:
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    ref = take(store, sbx)
    dst = sandbox(tmp_path, "dst")
    (dst / "workspace/stale").write_text("gone after restore")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref.name)
    assert listing(dst) == listing(sbx)


def test_incremental_and_unchanged(store: SnapshotStore, tmp_path: Path) -> None:
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    backend = HostDirBackend()
    ref = snapshot_sandbox(backend, sbx, store, TENANT, "s1", None)
    assert ref is not None
    store.settle()  # its manifest, carried by the pointer, is stored on its own after
    calls = count_calls(store)
    assert snapshot_sandbox(backend, sbx, store, TENANT, "s1", ref.manifest) is None
    assert sum(calls.values()) == 0
    (sbx / "workspace/src/m7.py").write_text("VALUE = 'changed'\n")
    ref2 = snapshot_sandbox(backend, sbx, store, TENANT, "s1", ref.manifest)
    assert ref2 is not None and ref2.stats["uploaded_blobs"] == 1
    assert ref2.stats["carried"] == 1.0  # small: the pointer carried the blob and manifest
    store.settle()
    # The pointer alone: its chain carries the blob and the manifest on (stored on their
    # own once the chain passes half the carry budget).
    assert calls["put_if"] == 1 and calls["put_addressed"] == 0 and calls["put"] == 0


def test_damaged_blob_is_refused(store: SnapshotStore, tmp_path: Path) -> None:
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    ref = take(store, sbx)
    blob = max(ref.manifest.blobs, key=lambda b: ref.manifest.blobs[b])
    key = store_keys.blob_key(TENANT, blob)
    data = bytearray(decode(store.objects.get(key)))
    data[1000] ^= 0x01
    store.objects.put(key, encode(bytes(data)))
    dst = sandbox(tmp_path, "dst")
    (dst / "workspace/keep").write_text("untouched")
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert (dst / "workspace/keep").read_text() == "untouched"
    store.objects.delete(key)
    with pytest.raises(SnapshotError, match="missing"):
        next(store.restore_plan(store.load(TENANT, "s1")))


def test_restore_in_parts(
    store: SnapshotStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ``STREAM_RESTORE_BYTES`` (made small here) a restore goes a tar at a
    time; a blob of a later part that does not verify says the sandbox is dirty."""
    monkeypatch.setattr(sync_mod, "STREAM_RESTORE_BYTES", 64 << 10)
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", 16 << 10)
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    ref = take(store, sbx)
    dst = sandbox(tmp_path, "dst")
    (dst / "workspace/stale").write_text("gone after restore")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
    assert listing(dst) == listing(sbx)
    blob = hashlib.sha256((sbx / "workspace/data.bin").read_bytes()).hexdigest()  # in tar 2
    key = store_keys.blob_key(TENANT, blob)
    data = bytearray(decode(store.objects.get(key)))
    data[1000] ^= 0x01
    store.objects.put(key, encode(bytes(data)))
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(HostDirBackend(), sandbox(tmp_path, "dst2"), store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert err.value.context["sandbox_dirty"] is True


def test_second_tenant_cannot_reach_the_first(store: SnapshotStore, tmp_path: Path) -> None:
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    ref = take(store, sbx)
    assert store.snapshots(OTHER, "s1") == []
    for call in (
        lambda: store.load(OTHER, "s1"),
        lambda: store.load(OTHER, "s1", ref.name),
        lambda: store.fork(OTHER, "s1", "s2"),
        lambda: restore_sandbox(HostDirBackend(), sbx, store, OTHER, "s1", ref.name),
    ):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(InvalidInput):
        store.load(OTHER, "s1", ref)
    with pytest.raises(InvalidInput):
        store.load(f"{TENANT}/../{OTHER}", "s1")
    assert store.gc(OTHER).blobs_deleted == 0
    assert store.load(TENANT, "s1").hash == ref.hash


def test_retention_gc_and_fork(store: SnapshotStore, tmp_path: Path) -> None:
    sbx = sandbox(tmp_path, "sbx")
    for i in range(4):
        (sbx / "workspace/big.bin").write_bytes(os.urandom(50_000) + bytes([i]))
        last = take(store, sbx)
    assert len(store.snapshots(TENANT, "s1")) == 2
    fork = store.fork(TENANT, "s1", "s2")
    assert fork.hash == last.hash
    report = store.gc(TENANT, now=time.time() + LATER)
    # kept: the last two snapshots, and the full manifest they are differences from
    assert report.blobs_deleted == 1 and report.blobs_referenced == 3
    dst = sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s2", None)
    assert (dst / "workspace/big.bin").read_bytes() == (sbx / "workspace/big.bin").read_bytes()


def test_a_snapshot_based_on_a_moved_pointer_is_refused(
    store: SnapshotStore, tmp_path: Path
) -> None:
    """Two workers that both think they hold the session (one was thought dead and
    came back): the second to commit does not put back a history without the
    first's snapshot."""
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)
    base = take(store, sbx)
    backend = HostDirBackend()
    drafts = []
    for text in ("A", "B"):
        (sbx / "workspace/src/m7.py").write_text(f"VALUE = {text!r}\n")
        draft = store.prepare(
            TENANT, "s1", backend.scan(sbx, ["/workspace", "/home/sandbox"]), base.manifest
        )
        assert draft is not None
        contents = {e.sha256 or "": (sbx / e.path[1:]).read_bytes() for e in draft.need.values()}
        drafts.append((draft, contents))
    first = store.commit(*drafts[0])
    with pytest.raises(SnapshotError, match="snapshotted elsewhere") as err:
        store.commit(*drafts[1])
    assert err.value.code == ErrorCode.SNAPSHOT_FAILED
    assert [r.name for r in store.snapshots(TENANT, "s1")] == [base.name, first.name]
    assert store.load(TENANT, "s1").hash == first.hash


# ---- MinIO going away -----------------------------------------------------------------


def stop_minio() -> None:
    pid = int(PID_FILE.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def start_minio() -> None:
    if not minio_ready():
        subprocess.run(["bash", str(MINIO_SH)], check=True, capture_output=True, timeout=120)
    assert minio_ready(), "deploy/local/minio.sh did not bring MinIO back"


def test_minio_stopped_mid_snapshot_then_back(tmp_path: Path) -> None:
    require_minio()
    if not PID_FILE.exists():
        pytest.skip(f"no MinIO pid file at {PID_FILE}: MinIO was not started by minio.sh")
    store = make_minio(threads=4)
    sbx = sandbox(tmp_path, "sbx")
    fill(sbx)

    class StopsMinio(HostDirBackend):
        def pack(self, sbx: Path, paths: list[str]) -> bytes:
            stop_minio()
            return super().pack(sbx, paths)

    try:
        t0 = time.monotonic()
        with pytest.raises(InfrastructureError) as err:
            snapshot_sandbox(StopsMinio(), sbx, store, TENANT, "s1", None)
        assert err.value.code == ErrorCode.STORE_UNAVAILABLE and err.value.retryable
        assert "is MinIO running?" in err.value.message and SETTINGS.endpoint in err.value.message
        assert time.monotonic() - t0 < 10
        start_minio()
        ref = snapshot_sandbox(HostDirBackend(), sbx, store, TENANT, "s1", None)
        assert ref is not None
        dst = sandbox(tmp_path, "dst")
        restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
        assert listing(dst) == listing(sbx)
    finally:
        start_minio()
        store.objects.drop_bucket()  # type: ignore[attr-defined]
        store.close()
