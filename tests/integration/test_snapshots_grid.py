"""Session workspaces on MinIO, at the grid level: the API and two real workers.

Real services only: Redis, Docker (runc), and a MinIO server of this module's
own, started with ``deploy/local/minio.sh`` on a free port with its own data
directory, so that stopping it (one test does) never disturbs the MinIO that
other tests and the ``make up`` grid use. The grid (``sandgrid.localgrid``)
uses that MinIO as its snapshot store, a bucket of its own, Redis database 12,
a short idle TTL (sessions are snapshotted and released 3 s after their last
turn) and short heartbeats (a killed worker is noticed in about 1.5 s).

Every process started here is stopped by its process group, MinIO by its pid
file, and every container of the grid's nodes is removed at the end.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.client import Client, Session
from sandgrid.errors import InvalidInput, NotFound, SnapshotError
from sandgrid.localgrid import LocalGrid
from sandgrid.models import ExecResult
from sandgrid.wire import names
from sandgrid.wire.objects import keys as store_keys
from tests.support.snapshot_stores import minio_store
from worker.ops.exec import exec_command
from worker.quotas import LABEL_SESSION, LABEL_WORKER
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.manifest import content_hash

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MINIO_SH = REPO / "deploy" / "local" / "minio.sh"
MINIO_BIN_DIR = os.environ.get("SANDGRID_BIN_DIR", "/var/lib/sandgrid/bin")
ACCESS, SECRET = "sandgrid", "sandgrid-secret"
API_PORT = int(os.environ.get("SANDGRID_TEST_SNAP_API_PORT", "8713"))
REDIS_URL = os.environ.get("SANDGRID_TEST_SNAP_REDIS_URL", "redis://127.0.0.1:6379/12")
NODES = ("snap-w1", "snap-w2")
UNPACK_NODE = "snap-unpack"
TOKENS = {"acme": "tok-snap-acme-" + "e" * 24, "globex": "tok-snap-globex-" + "f" * 24}
IDLE_TTL_S = 3.0


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"integration services missing in CI: {reason}")
    pytest.skip(reason)


# ---- a MinIO server of our own ---------------------------------------------------------


@dataclass
class PrivateMinio:
    """A MinIO started by ``deploy/local/minio.sh`` with its own state directory."""

    state: Path
    endpoint: str
    bucket: str

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SANDGRID_STATE_DIR": str(self.state),
            "SANDGRID_BIN_DIR": MINIO_BIN_DIR,
            "SANDGRID_MINIO__ENDPOINT": self.endpoint,
            "SANDGRID_MINIO__ACCESS_KEY": ACCESS,
            "SANDGRID_MINIO__SECRET_KEY": SECRET,
        }

    def ready(self) -> bool:
        try:
            url = f"http://{self.endpoint}/minio/health/ready"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def start(self) -> None:
        subprocess.run([str(MINIO_SH)], env=self.env, check=True, timeout=120, capture_output=True)
        assert self.ready(), "minio.sh returned but MinIO is not ready"

    def stop(self) -> None:
        """SIGKILL the server's process group (what a crash looks like), by its pid file."""
        pid_file = self.state / "run" / "minio.pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        pid_file.unlink()
        deadline = time.monotonic() + 20
        while self.ready() or _running(pid):
            assert time.monotonic() < deadline, "MinIO did not stop"
            time.sleep(0.1)

    def client(self) -> Any:
        from minio import Minio

        return Minio(self.endpoint, access_key=ACCESS, secret_key=SECRET, secure=False)


def _running(pid: int) -> bool:
    """Alive and not a zombie (the server is not our child: init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMinio]:
    if not Path(MINIO_BIN_DIR, "minio").exists():
        _unavailable(f"no MinIO binary in {MINIO_BIN_DIR} (deploy/local/minio.sh builds it)")
    server = PrivateMinio(
        tmp_path_factory.mktemp("minio"),
        f"127.0.0.1:{_free_port()}",
        f"sgtest-grid-{uuid.uuid4().hex[:10]}",
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ---- the grid ---------------------------------------------------------------------------


@dataclass
class Grid:
    local: LocalGrid
    minio: PrivateMinio
    redis: redis.Redis[str]

    def client(self, tenant: str = "acme") -> Client:
        return Client(self.local.api_url, TOKENS[tenant])

    def restart(self, node: str) -> None:
        self.local.start_worker(node, types="python", concurrency=2)
        self.local.wait(lambda: node in self.local.workers_seen(), f"{node} back")

    def kill(self, node: str) -> None:
        """SIGKILL the worker's process group, then wait until the grid sees it dead."""
        self.local.kill(node)
        wait_for(lambda: not self.redis.exists(names.node_key(node)), f"{node}'s heartbeat")

    def other(self, node: str) -> str:
        return next(n for n in NODES if n != node)


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def _remove_node_containers() -> None:
    import docker

    client = docker.from_env(timeout=60)
    for node in (*NODES, UNPACK_NODE):
        for c in client.containers.list(all=True, filters={"label": f"{LABEL_WORKER}={node}"}):
            c.remove(force=True)
    client.close()


@pytest.fixture(scope="module")
def grid(minio: PrivateMinio, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Grid]:
    try:
        import docker

        docker.from_env(timeout=10).images.get("sandgrid/sandbox-python:latest")
    except Exception as exc:
        _unavailable(f"Docker or the sandbox image is not available: {exc}")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    env = {
        "SANDGRID_LEASE_TTL_S": "4",
        "SANDGRID_HEARTBEAT_S": "0.5",
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__IDLE_TTL_S": str(IDLE_TTL_S),
        "SANDGRID_WORKER__REAP_INTERVAL_S": "0.5",
        "SANDGRID_WORKER__SNAPSHOT_STORE": "minio",
        "SANDGRID_MINIO__ENDPOINT": minio.endpoint,
        "SANDGRID_MINIO__ACCESS_KEY": ACCESS,
        "SANDGRID_MINIO__SECRET_KEY": SECRET,
        "SANDGRID_MINIO__BUCKET": minio.bucket,
    }
    local = LocalGrid(
        tmp_path_factory.mktemp("grid"),
        port=API_PORT,
        redis_url=REDIS_URL,
        tenants=TOKENS,
        env=env,
    )
    try:
        local.start(list(NODES), concurrency=2)
        yield Grid(local, minio, r)
    finally:
        local.stop()
        _remove_node_containers()
        r.flushdb()
        r.close()


@pytest.fixture
def acme(grid: Grid) -> Iterator[Client]:
    with grid.client() as c:
        yield c


def ok(result: ExecResult) -> ExecResult:
    assert result.exit_code == 0, result
    return result


def store(grid: Grid) -> Any:

    m = grid.minio
    return minio_store(m.endpoint, ACCESS, SECRET, m.bucket)


def wait_released(s: Session) -> None:
    """Until the idle reaper has snapshotted and released the session."""
    wait_for(lambda: s.refresh().owner is None, f"session {s.id} released", IDLE_TTL_S + 15)


# ---- a workspace moves between workers ------------------------------------------------------


def _wheel(name: str, version: str, source: str) -> tuple[str, bytes]:
    """A minimal pure-Python wheel, built here (nothing is fetched from an index)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: sandgrid-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


def test_a_file_a_user_wheel_and_a_venv_follow_the_session_to_another_worker(
    acme: Client, grid: Grid
) -> None:
    wheel, data = _wheel("sgdemo", "1.0", "VALUE = 'installed on the first worker'\n")
    with acme.session() as s:
        s.write_file(wheel, data)
        s.write_file("notes.txt", "written on the first worker\n")
        install = f"pip install --user --no-index ./{wheel} && python3 -m venv --without-pip venv"
        first = ok(s.exec(shell=install, timeout_s=120))
        grid.kill(first.node)
        try:
            check = (
                "cat notes.txt && python3 -c 'import sgdemo; print(sgdemo.VALUE)' && "
                "venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)'"
            )
            after = ok(s.exec(shell=check))
            assert after.node == grid.other(first.node)
            assert after.stdout.splitlines() == [
                "written on the first worker",
                "installed on the first worker",
                "True",
            ]
        finally:
            grid.restart(first.node)


# ---- the store goes away and comes back -------------------------------------------------------


def test_store_down_during_a_turn_answers_its_result_unsaved_and_the_session_stays_usable(
    acme: Client, grid: Grid
) -> None:
    with acme.session() as s:
        ok(s.exec(shell="echo before > before.txt"))
        failed: list[BaseException] = []
        results: list[ExecResult] = []

        def turn() -> None:
            try:
                results.append(s.exec(shell="sleep 1.5; echo during > during.txt"))
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=turn)
        t.start()
        try:
            time.sleep(0.5)
            grid.minio.stop()  # while the turn runs: its snapshot finds no store
            t.join(60)
            assert not failed, failed
            # it ran: its result, marked not saved with the store's error
            (res,) = results
            assert res.exit_code == 0 and res.saved is False and res.saved_error is not None
            assert res.saved_error.code == "store_unavailable"
            # usable: the same sandbox still has what the turn wrote (a read changes
            # nothing, so it answers although the pending snapshot still fails)
            assert s.read_file("during.txt") == "during\n"
            assert s.refresh().unsaved
        finally:
            grid.minio.start()
        ok(s.exec(shell="echo after > after.txt"))
        assert not s.refresh().unsaved
        st = store(grid)
        try:
            paths = {e.path for e in st.load("acme", s.id).entries}
        finally:
            st.close()
        assert {f"/workspace/{n}.txt" for n in ("before", "during", "after")} <= paths


# ---- what a restore refuses -----------------------------------------------------------------


def _session_containers(session_id: str) -> list[Any]:
    import docker

    client = docker.from_env(timeout=30)
    try:
        return list(client.containers.list(filters={"label": f"{LABEL_SESSION}={session_id}"}))
    finally:
        client.close()


def test_a_corrupt_blob_is_refused_and_never_half_restored(acme: Client, grid: Grid) -> None:
    with acme.session() as s:
        ok(s.exec(shell="head -c 300000 /dev/urandom > big.bin && echo small > small.txt"))
        wait_released(s)
        st = store(grid)
        minio = grid.minio.client()
        try:
            manifest = st.load("acme", s.id)
            blob = manifest.where[next(e.sha256 for e in manifest.files() if e.size > 1000)].blob
            key = store_keys.blob_key("acme", blob)
            original = minio.get_object(grid.minio.bucket, key).read()
            bad = encode(os.urandom(300_000))
            minio.put_object(grid.minio.bucket, key, io.BytesIO(bad), len(bad))
            for _ in range(2):  # refused every time, and nothing is left behind
                with pytest.raises(SnapshotError) as err:
                    s.exec(shell="ls")
                assert err.value.code == "snapshot_corrupt" and blob in err.value.message
                assert s.refresh().owner is None and _session_containers(s.id) == []
            minio.put_object(grid.minio.bucket, key, io.BytesIO(original), len(original))
            ok(s.exec(shell="sha256sum big.bin > sum && cat small.txt"))
        finally:
            st.close()


def test_a_hostile_manifest_is_refused(acme: Client, grid: Grid) -> None:
    """A manifest crafted in the bucket with a path through a symlink to /etc."""
    with acme.session() as s:
        ok(s.exec(shell="echo hi > a.txt && ln -s /etc esc"))
        wait_released(s)
        st = store(grid)
        try:
            latest = st.latest("acme", s.id)
            assert latest is not None
            pkey = store_keys.pointer_key("acme", s.id)
            pointer = json.loads(bytes(decode(st.objects.get(pkey))))
            carried = pointer.get("carried", {}).get("manifests", [])
            for entry in carried:  # a small snapshot: its pointer carries it
                if entry[0] == latest.name:
                    entry[1] = _hostile(entry[1].encode()).decode()
            if latest.name in {n for n, _ in carried}:
                st.objects.put(pkey, encode(json.dumps(pointer).encode()))
            else:
                key = store_keys.manifest_key("acme", s.id, latest.name)
                st.objects.put(key, encode(_hostile(bytes(decode(st.objects.get(key))))))
        finally:
            st.close()
        with pytest.raises(SnapshotError) as err:
            s.exec(shell="ls /etc/cron.d")
        assert err.value.code == "snapshot_corrupt"
        assert "/workspace/esc" in err.value.message and "symlink" in err.value.message
        assert _session_containers(s.id) == []


def _hostile(manifest: bytes) -> bytes:
    """A manifest's JSON with a directory through the symlink ``/workspace/esc``,
    rehashed: the entry rules refuse it, not the hash."""
    doc = json.loads(manifest)
    rows = doc["entries"] if doc["base"] is None else doc["upsert"]
    rows.append(["/workspace/esc/cron.d", "dir", 0o755, 0, None, None, None, None])
    rows.sort(key=lambda row: row[0])
    if doc["base"] is None:
        doc["hash"] = content_hash(doc["roots"], [Entry(*row[:6]) for row in rows])
    return json.dumps(doc).encode()


def _tar(*members: tuple[str, bytes, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = extra
                t.addfile(info)
            else:
                info.size, info.mode = len(extra), 0o644
                t.addfile(info, io.BytesIO(extra.encode()))
    return buf.getvalue()


def test_the_agents_unpack_refuses_traversal_and_writes_through_links(grid: Grid) -> None:
    """The backend's ``unpack`` against a real container, as a restore calls it."""
    from worker.runtimes import runtime_for
    from worker.sandboxes import SandboxManager

    backend = SandboxManager(runtime_for("runc"), node=UNPACK_NODE)
    sbx = backend.create("python")
    try:
        ok(exec_command(backend, sbx, _req("echo kept > keep.txt && ln -s /tmp tmplink")))
        roots = ["/workspace", "/home/sandbox"]
        through = (
            ("workspace/l", tarfile.SYMTYPE, "/tmp"),
            ("workspace/l/evil", tarfile.REGTYPE, "x"),
        )
        for data in (
            _tar(("workspace/../tmp/evil", tarfile.REGTYPE, "x")),
            _tar(("tmp/evil", tarfile.REGTYPE, "x")),
            _tar(*through),
            _tar(*reversed(through)),
        ):
            for clear in (False, True):  # refused before anything is cleared
                with pytest.raises(InvalidInput):
                    backend.files.unpack(sbx, data, roots, clear)
        with pytest.raises(InvalidInput, match="not a directory"):  # a link already there
            backend.files.unpack(
                sbx, _tar(("workspace/tmplink/evil", tarfile.REGTYPE, "x")), roots, False
            )
        check = "cat keep.txt; readlink tmplink; test -e /tmp/evil && echo WRITTEN || echo clean"
        assert ok(exec_command(backend, sbx, _req(check))).stdout == "kept\n/tmp\nclean\n"
        links = _tar(("workspace/py", tarfile.SYMTYPE, "/usr/bin/python3"))
        assert backend.files.unpack(sbx, links, roots, True) == 1  # a link's target is data
        assert ok(exec_command(backend, sbx, _req("./py -c 'print(42)'"))).stdout == "42\n"
    finally:
        backend.destroy(sbx)


def _req(shell: str) -> Any:
    from sandgrid.models import ExecRequest

    return ExecRequest(shell=shell)


# ---- tenants ---------------------------------------------------------------------------


def test_another_tenant_reaches_nothing_of_the_first(acme: Client, grid: Grid) -> None:
    with acme.session() as s, grid.client("globex") as globex:
        ok(s.exec(shell="echo secret > s.txt"))
        for call in (
            lambda: globex.get_session(s.id),
            lambda: globex.exec(s.id, shell="cat s.txt"),
            lambda: globex.read_file(s.id, "s.txt"),
            lambda: globex.list_files(s.id),
            lambda: globex.download_tar(s.id),
            lambda: globex.upload_tar(s.id, _tar(("x", tarfile.REGTYPE, "x"))),
            lambda: globex.write_files(s.id, {"x": "y"}),
            lambda: globex.delete_file(s.id, "s.txt"),
            lambda: globex.create_session(fork_from=s.id),
            lambda: globex.close_session(s.id),
        ):
            with pytest.raises(NotFound):
                call()
        assert s.id not in {x.id for x in globex.list_sessions()}
        assert [x.id for x in globex.list_sessions()] == []
        assert s.read_file("s.txt") == "secret\n"
    st = store(grid)
    try:
        assert st.sessions("globex") == []  # nothing was forked or written for globex
    finally:
        st.close()


# ---- exactly one run per turn ----------------------------------------------------------------


def _running_turn(r: redis.Redis[str], session_id: str) -> dict[str, str] | None:
    for key in r.scan_iter(match=names.turn_key("*")):
        record = r.hgetall(key)
        if record.get("session") == session_id and record.get("state") == "running":
            return record
    return None


def test_a_turn_whose_worker_dies_runs_again_exactly_once(acme: Client, grid: Grid) -> None:
    with acme.session() as s:
        ok(s.exec(shell="echo setup > log.txt"))
        results: list[Any] = []
        t = threading.Thread(
            target=lambda: results.append(
                _catch(lambda: s.exec(shell="echo line >> log.txt; sleep 5", timeout_s=30))
            )
        )
        t.start()
        record = wait_for(lambda: _running_turn(grid.redis, s.id), "the turn to run", 30)
        doomed = record["node"]
        time.sleep(0.5)  # the line is written; the turn is sleeping
        try:
            grid.kill(doomed)
            t.join(60)
            assert results and isinstance(results[0], ExecResult), results
            assert results[0].exit_code == 0 and results[0].node == grid.other(doomed)
            assert s.read_file("log.txt") == "setup\nline\n"
        finally:
            grid.restart(doomed)


def _catch(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return exc


# ---- fork, close, policies, the idle reaper ---------------------------------------------------


def test_a_fork_starts_from_the_source_and_outlives_its_close(acme: Client, grid: Grid) -> None:
    src = acme.session()
    ok(src.exec(shell="mkdir -p data && echo origin > data/a.txt"))
    with acme.session(fork_from=src.id) as fork:
        assert fork.info.forked_from == src.id and fork.info.snapshot
        ok(fork.exec(shell="echo forked > data/b.txt && cat data/a.txt"))
        assert ok(src.exec(shell="ls data")).stdout == "a.txt\n"  # the source is unchanged
        src.close()
        st = store(grid)
        try:
            wait_for(lambda: st.snapshots("acme", src.id) == [], "the source's snapshots deleted")
        finally:
            st.close()
        wait_released(fork)
        assert ok(fork.exec(shell="cat data/a.txt data/b.txt")).stdout == "origin\nforked\n"


def test_policies_and_the_idle_reaper(acme: Client, grid: Grid) -> None:
    sessions = {p: acme.session(snapshot_policy=p) for p in ("after_turn", "on_idle", "never")}
    try:
        for policy, s in sessions.items():
            ok(s.exec(shell=f"echo {policy} > p.txt"))
        assert sessions["after_turn"].refresh().snapshot is not None
        for policy in ("on_idle", "never"):
            info = sessions[policy].refresh()
            assert info.snapshot is None and info.unsaved, info
        for s in sessions.values():
            wait_released(s)
        assert sessions["on_idle"].refresh().snapshot is not None  # saved on release
        assert not sessions["on_idle"].refresh().unsaved
        assert sessions["never"].refresh().snapshot is None
        for policy in ("after_turn", "on_idle"):  # restored transparently
            assert ok(sessions[policy].exec(shell="cat p.txt")).stdout == f"{policy}\n"
        gone = sessions["never"].exec(shell="cat p.txt 2>&1 || true")
        assert "No such file" in gone.stdout  # never saved: a fresh workspace
    finally:
        for s in sessions.values():
            s.close()
