"""The worker's snapshot policy end to end, without containers: the real executor,
node, reaper and ``Persistence`` over host directories (``HostDirBackend``), a
local store that can be switched off, and the real registry (Redis db 15).

Covers the policies (after_turn, on_idle, never), a store that is down after a
turn (the turn says it ran but was not saved; the session stays usable), the
idle reaper, close (snapshots deleted), fork, and the rate-limited collection.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.errors import ErrorCode, InfrastructureError
from sandgrid.models import (
    ExecRequest,
    ExecResult,
    FileRead,
    FileWrite,
    Quotas,
    SessionCreate,
    SessionInfo,
)
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import ReadOp, WriteOp, WriteResult
from sandgrid.ops.session import CloseOp, CloseResult, ForkOp, ForkResult
from sandgrid.wire.jobs import TurnJob, TurnOp, TurnOutcome, expect
from sandgrid.wire.objects import LocalObjects, keys
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import Settings, SnapshotSettings, WorkerSettings
from scheduler.registry.sessions import SessionRegistry, new_turn_id
from tests.support.hostdir import HostDirBackend
from worker.node import Node
from worker.snapshots import SnapshotStore
from worker.snapshots import sync as sync_mod
from worker.turns.snapshot_policy import Persistence

TENANT = "acme"


@dataclass
class DirSandbox:
    """A 'sandbox' that is a host directory standing for the sandbox's ``/``."""

    path: Path
    id: str
    sandbox_type: str = "python"
    state: str = "leased"
    quotas: Quotas = field(default_factory=Quotas)
    scan_after_exec: tuple[str, ...] | None = None
    """Asked for by the snapshot policy; the double's exec ignores the ``then``."""
    scan_state: Any = None
    scan_ready: Any = None


class DirBackend(HostDirBackend):
    """The backend calls the executor and the op handlers make, over a ``DirSandbox``."""

    node = "dir"

    @property
    def files(self) -> DirBackend:
        """Its snapshot operations (``SandboxManager.files``): the double itself."""
        return self

    def scan(self, sbx: Any, roots: list[str]) -> list[dict[str, Any]]:
        return super().scan(sbx.path, roots)

    def pack(self, sbx: Any, paths: list[str]) -> bytes:
        return super().pack(sbx.path, paths)

    def unpack(self, sbx: Any, data: bytes, roots: list[str], clear: bool) -> int:
        return super().unpack(sbx.path, data, roots, clear)

    def call(self, sbx: DirSandbox, op: str, fields: dict[str, Any], **_: Any) -> dict[str, Any]:
        """The agent requests of the write, read and exec handlers."""
        workspace = sbx.path / "workspace"
        if op == "write":
            for f in fields["files"]:
                (workspace / f["path"]).write_bytes(base64.b64decode(f["data_b64"]))
            return {"written": len(fields["files"])}
        if op == "read":
            data = (workspace / fields["path"]).read_bytes()
            return {"data_b64": base64.b64encode(data).decode()}
        assert op == "exec", op
        return {"exit_code": 0, "stdout": fields["argv"][-1]}  # the shell source


class DirPool:
    """A warm pool of fresh directories; ``discard`` deletes one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ids = count()
        self.live: dict[str, DirSandbox] = {}

    def acquire(self, sandbox_type: str, quotas: Any, **_: Any) -> DirSandbox:
        name = f"sbx{next(self.ids)}"
        path = self.root / name
        (path / "workspace").mkdir(parents=True)
        (path / "home/sandbox").mkdir(parents=True)
        self.live[name] = DirSandbox(path, name)
        return self.live[name]

    def discard(self, sbx: DirSandbox) -> None:
        sbx.state = "destroyed"
        self.live.pop(sbx.id, None)
        shutil.rmtree(sbx.path, ignore_errors=True)

    def container_ids(self) -> set[str]:
        return set(self.live)

    def start(self) -> None:
        pass

    def close(self) -> None:
        for sbx in list(self.live.values()):
            self.discard(sbx)


class SwitchableObjects(LocalObjects):
    """Local objects whose every primitive fails while ``down`` (MinIO stopped)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise InfrastructureError(
                "snapshot store is unavailable", code=ErrorCode.STORE_UNAVAILABLE, retryable=True
            )

    def put(self, key: str, data: bytes) -> None:
        self._check()
        super().put(key, data)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        self._check()
        return super().put_if(key, data, tag)

    def get(self, key: str) -> bytes:
        self._check()
        return super().get(key)

    def mtime(self, key: str) -> float | None:
        self._check()
        return super().mtime(key)

    def list(self, prefix: str) -> list[str]:
        self._check()
        return super().list(prefix)

    def delete(self, key: str) -> None:
        self._check()
        super().delete(key)


def make_node(
    tmp: Path,
    registry: SessionRegistry,
    idle_ttl_s: float = 300.0,
    store: SnapshotStore | None = None,
) -> Node:
    """A real ``Node`` with host-directory sandboxes instead of Docker."""
    snaps = SnapshotSettings(gc_interval_s=0.01)
    worker = WorkerSettings(idle_ttl_s=idle_ttl_s, reap_interval_s=0.05, snapshots=snaps)
    return Node(
        "n1",
        ["python"],
        Settings(worker=worker),
        registry.ledger,
        store or SnapshotStore(SwitchableObjects(tmp / "store")),
        backends={"runc": DirBackend()},  # type: ignore[dict-item]
        pool=DirPool(tmp / "sandboxes"),  # type: ignore[arg-type]
    )


def reg(node: Node) -> SessionRegistry:
    """A registry over the node's Redis, for what the API does in these tests
    (create, close...); the node's ledger is the registry's own (``make_node``)."""
    assert isinstance(node.ledger, RedisLedger)
    return SessionRegistry(node.ledger.redis, lease_ttl_s=node.ledger.lease_ttl_s)


@pytest.fixture
def registry(redis_client: redis.Redis[str]) -> SessionRegistry:
    return SessionRegistry(redis_client, lease_ttl_s=30)


@pytest.fixture
def node(tmp_path: Path, registry: SessionRegistry) -> Iterator[Node]:
    node = make_node(tmp_path, registry)
    yield node
    node.store.close()


def new_session(registry: SessionRegistry, policy: str = "after_turn") -> SessionInfo:
    return registry.create(TENANT, SessionCreate.model_validate({"snapshot_policy": policy}))


def turn(node: Node, info: SessionInfo, op: TurnOp) -> TurnOutcome:
    fresh = reg(node).get_any(info.id) or info
    return node.executor.run(TurnJob(turn_id=new_turn_id(), session=fresh, op=op))


def write(node: Node, info: SessionInfo, path: str, content: str) -> TurnOutcome:
    return turn(node, info, WriteOp(files=[FileWrite(path=path, content=content)]))


def read(node: Node, info: SessionInfo, path: str) -> str:
    out = turn(node, info, ReadOp(path=path))
    assert out.ok, out.error
    return expect(out, FileRead, "read").content


def release_all(node: Node) -> None:
    """What the idle reaper does once the TTL has passed."""
    for local in list(node.sessions):
        local.last_used = 0.0
    node.reaper.reap_idle()


# ---- policies ---------------------------------------------------------------------


def test_after_turn_saves_every_changing_turn_before_it_reports(node: Node) -> None:
    info = new_session(reg(node))
    out = write(node, info, "a.txt", "one")
    assert out.ok and out.snapshot
    fresh = reg(node).get(TENANT, info.id)
    assert fresh.snapshot == out.snapshot and not fresh.unsaved and fresh.turns == 1
    assert [r.name for r in node.store.snapshots(TENANT, info.id)] == [out.snapshot]
    assert read(node, info, "a.txt") == "one"
    assert len(node.store.snapshots(TENANT, info.id)) == 1  # a read saves nothing


def test_on_idle_saves_only_when_the_sandbox_is_released(node: Node) -> None:
    info = new_session(reg(node), "on_idle")
    assert write(node, info, "a.txt", "kept").ok
    fresh = reg(node).get(TENANT, info.id)
    assert fresh.snapshot is None and fresh.unsaved
    assert node.store.snapshots(TENANT, info.id) == []
    release_all(node)
    assert len(node.sessions) == 0
    fresh = reg(node).get(TENANT, info.id)
    assert fresh.snapshot and not fresh.unsaved and fresh.owner is None
    assert read(node, info, "a.txt") == "kept"  # restored transparently


def test_never_keeps_the_workspace_only_in_its_sandbox(node: Node) -> None:
    info = new_session(reg(node), "never")
    assert write(node, info, "a.txt", "ephemeral").ok
    assert reg(node).get(TENANT, info.id).unsaved
    release_all(node)
    assert node.store.snapshots(TENANT, info.id) == [] and len(node.sessions) == 0
    out = turn(node, info, ReadOp(path="a.txt"))
    assert not out.ok  # a fresh, empty workspace


# ---- the store is down --------------------------------------------------------------


def test_a_turn_whose_snapshot_fails_says_so_and_the_session_stays_usable(node: Node) -> None:
    store: Any = node.store.objects
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "saved").ok
    store.down = True
    out = write(node, info, "b.txt", "not yet saved")
    assert out.ok and out.error is None and out.result is not None  # it ran: its result
    result = expect(out, WriteResult, "write")
    assert result.written == 1 and result.saved is False and result.saved_error is not None
    assert result.saved_error.code == "store_unavailable"
    assert "unavailable" in result.saved_error.message
    fresh = reg(node).get(TENANT, info.id)
    assert fresh.turns == 2 and fresh.unsaved  # counted; a worker loss must not re-run
    assert read(node, info, "b.txt") == "not yet saved"  # usable, same sandbox
    release_all(node)  # the reaper keeps what it cannot save
    assert node.sessions.get(info.id) is not None
    store.down = False
    out = write(node, info, "c.txt", "now")
    assert out.ok, out.error
    assert not reg(node).get(TENANT, info.id).unsaved


def test_an_exec_whose_snapshot_fails_answers_its_output_not_saved(node: Node) -> None:
    store: Any = node.store.objects
    info = new_session(reg(node))
    store.down = True
    out = turn(node, info, ExecOp(request=ExecRequest(shell="echo ran")))
    assert out.ok, out.error
    result = ExecResult.model_validate(out.result)
    assert result.stdout == "echo ran" and result.exit_code == 0
    assert result.saved is False and result.saved_error is not None
    assert result.saved_error.code == "store_unavailable"
    assert reg(node).get(TENANT, info.id).unsaved
    store.down = False
    again = ExecResult.model_validate(
        turn(node, info, ExecOp(request=ExecRequest(shell="x"))).result
    )
    assert again.saved and again.saved_error is None
    assert not reg(node).get(TENANT, info.id).unsaved


def test_everything_changed_while_down_is_in_the_next_snapshot(tmp_path: Path, node: Node) -> None:
    store: Any = node.store.objects
    info = new_session(reg(node))
    store.down = True
    down = write(node, info, "a.txt", "1")
    assert down.ok and expect(down, WriteResult, "write").saved is False
    store.down = False
    up = write(node, info, "b.txt", "2")
    assert up.ok and expect(up, WriteResult, "write").saved_error is None
    other = make_node(tmp_path / "other", reg(node), store=node.store)  # one store, as MinIO
    assert node.sessions.pop(info.id) is not None  # as if this worker died
    node.ledger.release_lease(info.id, node.name)
    assert read(other, info, "a.txt") == "1" and read(other, info, "b.txt") == "2"


# ---- close, fork, collection ----------------------------------------------------------


def test_close_destroys_the_sandbox_and_deletes_the_snapshots(node: Node) -> None:
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "1").ok
    reg(node).close(info.id)
    out = turn(node, info, CloseOp())
    assert out.ok and out.result == CloseResult(closed=True, snapshots_deleted=1)
    assert len(node.sessions) == 0 and node.pool.container_ids() == set()  # type: ignore[attr-defined]
    assert node.store.snapshots(TENANT, info.id) == []


def test_a_fork_starts_from_the_source_and_outlives_it(node: Node) -> None:
    src = new_session(reg(node))
    assert write(node, src, "a.txt", "from the source").ok
    dst = reg(node).create(TENANT, SessionCreate(), forked_from=src.id)
    out = turn(node, dst, ForkOp(source=src.id))
    assert (
        out.ok
        and reg(node).get(TENANT, dst.id).snapshot == expect(out, ForkResult, "fork").snapshot
    )
    assert write(node, dst, "b.txt", "only in the fork").ok
    reg(node).close(src.id)
    assert turn(node, src, CloseOp()).ok
    node.store.gc(TENANT, now=time.time() + 10 * node.store.gc_grace_s)
    release_all(node)
    assert read(node, dst, "a.txt") == "from the source"
    assert read(node, dst, "b.txt") == "only in the fork"


def test_collection_deletes_closed_sessions_left_behind_and_is_rate_limited(node: Node) -> None:
    store: Any = node.store
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "1").ok
    reg(node).close(info.id)
    store.objects.down = True  # the close's deletion fails: the snapshots are left behind
    assert turn(node, info, CloseOp()).ok
    store.objects.down = False
    assert len(store.snapshots(TENANT, info.id)) == 1
    keep = new_session(reg(node))
    assert write(node, keep, "k.txt", "open").ok
    time.sleep(0.02)
    assert node.persistence.collect_due() == 1
    assert store.snapshots(TENANT, info.id) == []
    assert len(store.snapshots(TENANT, keep.id)) == 1  # an open session is never touched
    time.sleep(0.02)
    node.ledger.claim_gc(TENANT, 60)  # another node holds this interval
    assert node.persistence.collect_due() == 0


def test_a_corrupt_snapshot_is_refused_and_leaves_no_sandbox(node: Node) -> None:
    node.store.carry_bytes = 0  # stored on its own, where the test damages it
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "x" * 10_000).ok
    release_all(node)
    for blob in (node.store.objects.root / "t" / TENANT / "blobs").iterdir():  # type: ignore[attr-defined]
        blob.write_bytes(b"garbage")
    out = turn(node, info, ReadOp(path="a.txt"))
    assert not out.ok and out.error is not None and out.error["code"] == "snapshot_corrupt"
    assert reg(node).lease_owner(info.id) is None  # free for any node, not held here
    assert len(node.sessions) == 0 and node.pool.container_ids() == set()  # type: ignore[attr-defined]


def test_a_restore_that_fails_after_touching_the_sandbox_destroys_it(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore in parts whose later part does not verify: the sandbox holds part
    of the snapshot, says so (``sandbox_dirty``), and is destroyed, never kept."""
    monkeypatch.setattr(sync_mod, "STREAM_RESTORE_BYTES", 8 << 10)
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", 8 << 10)
    node.store.pack_bytes = 4 << 10  # a blob per file: the last one is in the last tar
    node.store.carry_bytes = 0  # stored on its own, where the test damages a blob
    info = new_session(reg(node))
    files = [FileWrite(path=f"f{i:02d}.txt", content=f"{i:02d}" * 1500) for i in range(12)]
    assert turn(node, info, WriteOp(files=files)).ok
    release_all(node)
    manifest = node.store.load(TENANT, info.id)
    last = manifest.where[hashlib.sha256(b"11" * 1500).hexdigest()].blob
    node.store.objects.put(keys.blob_key(TENANT, last), b"garbage")
    out = turn(node, info, ReadOp(path="f00.txt"))
    assert not out.ok and out.error is not None and out.error["code"] == "snapshot_corrupt"
    assert out.error["context"]["sandbox_dirty"] is True and out.error["context"]["part"] > 0
    assert reg(node).lease_owner(info.id) is None
    assert len(node.sessions) == 0 and node.pool.container_ids() == set()  # type: ignore[attr-defined]
    assert list(node.pool.root.iterdir()) == []  # type: ignore[attr-defined]  # removed from disk


def test_a_restarted_node_still_collects_the_tenants_served_before(node: Node) -> None:
    store: Any = node.store
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "1").ok
    reg(node).close(info.id)
    store.objects.down = True  # the close's deletion fails: the snapshots are left behind
    assert turn(node, info, CloseOp()).ok
    store.objects.down = False
    # what a restarted worker has: no memory of the tenant
    fresh = Persistence(node.ledger, node.store, node.backend_for, node.settings.worker.snapshots)
    assert fresh.collect_due() == 1
    assert store.snapshots(TENANT, info.id) == []
    assert node.ledger.gc_tenants(0) == [TENANT]
    assert node.ledger.gc_tenants(time.time() + 1) == []  # too old: dropped


def test_a_close_deletes_the_sessions_memory_images(node: Node) -> None:
    from sandgrid.wire.objects import keys

    store: Any = node.store
    info = new_session(reg(node))
    assert write(node, info, "a.txt", "1").ok
    store.objects.put(keys.memory_image_key(TENANT, info.id, "a" * 64), b"an image")
    reg(node).close(info.id)
    assert turn(node, info, CloseOp()).ok
    assert store.objects.list(keys.memory_prefix(TENANT, info.id)) == []
