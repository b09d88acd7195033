"""A fake worker and an in-process grid for API tests: a ``Dispatcher`` that runs turns in-process.

It behaves like a real node as far as the scheduler can see: it heartbeats,
claims the turn, takes the session's lease, records the turn, and answers with a
``TurnOutcome`` whose result has the shape the real worker returns.
"""

from __future__ import annotations

import base64
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sandgrid.client import Client
from sandgrid.errors import NotFound, SandboxLost, SandgridError
from sandgrid.models import CodeResult, ExecResult, FileEntry, FileList, FileRead
from sandgrid.ops.code import RunCodeOp
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import (
    DeleteOp,
    DeleteResult,
    ListOp,
    MkdirOp,
    MkdirResult,
    MoveOp,
    MoveResult,
    ReadOp,
    StatOp,
    StatResult,
    TarDownloadOp,
    TarDownloadResult,
    TarUploadOp,
    TarUploadResult,
    WriteOp,
    WriteResult,
)
from sandgrid.ops.lifecycle import LIFECYCLE_OPS, PauseOp
from sandgrid.ops.session import CloseOp, CloseResult, ForkOp, ForkResult
from sandgrid.wire import names
from sandgrid.wire.builds import BuildJob
from sandgrid.wire.jobs import TurnJob, TurnOutcome, TurnResult
from sandgrid.wire.ledger import NodeRecord, SessionLedger
from sandgrid.wire.objects import LocalObjects, ObjectStore
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import Settings
from scheduler.api import create_app
from scheduler.api.deps import Services
from scheduler.registry.nodes import NodeDirectory
from scheduler.tenants import TenantLimits, TenantStore
from tests.support.fake_lifecycle import FakeCheckpoints


class FakeWorker:
    """Runs each job when the scheduler waits for it.

    Attributes:
        sent: every (job, queue) sent, in order.
        hold: when set to an Event, outcomes wait for it (turns stay in flight).
        node: the node name it claims turns and leases as.
        silent: never answer (the node "dies" after claiming).
    """

    def __init__(self, registry: SessionLedger, node: str = "fake-1") -> None:
        self.registry = registry
        self.node = node
        self.sent: list[tuple[TurnJob, str]] = []
        self.builds: list[tuple[BuildJob, str]] = []  # 25.2: templates' builds, never run
        self.hold: threading.Event | None = None
        self.silent = False
        self.files: dict[tuple[str, str], str] = {}
        self.checkpoints = FakeCheckpoints(self.files)
        self._done: dict[str, TurnOutcome] = {}
        self._lock = threading.Lock()

    def send(self, job: TurnJob, queue: str, *, expires: float) -> TurnJob:
        with self._lock:
            self.sent.append((job, queue))
        return job

    def send_build(self, job: BuildJob, queue: str) -> None:
        """Take a template's build (it stays ``building``: the fake runs no sandbox)."""
        with self._lock:
            self.builds.append((job, queue))

    def wait(self, job: TurnJob, timeout: float) -> TurnOutcome | None:
        if self.silent:
            self.registry.claim_turn(job.turn_id, self.node, job.attempt)
            threading.Event().wait(timeout)
            return None
        if self.hold is not None and not self.hold.wait(timeout):
            return None
        with self._lock:
            sent = any((j.turn_id, j.attempt) == (job.turn_id, job.attempt) for j, _ in self.sent)
        if not sent:  # like Celery: no result for a task nobody sent
            threading.Event().wait(timeout)
            return None
        with self._lock:
            if job.turn_id not in self._done:
                self._done[job.turn_id] = self.run(job)
            return self._done[job.turn_id]

    def forget(self, handle: Any) -> None:
        pass

    def handle_of(self, job: TurnJob) -> TurnJob:
        return job

    def run(self, job: TurnJob) -> TurnOutcome:
        self.registry.heartbeat(self.node, 30)
        assert self.registry.claim_turn(job.turn_id, self.node, job.attempt)
        assert self.registry.acquire_lease(job.session.id, self.node)
        try:
            result = self._apply(job)
        except SandgridError as exc:
            return TurnOutcome(
                turn_id=job.turn_id, node=self.node, ok=False, error=exc.to_body()["error"]
            )
        if not isinstance(job.op, CloseOp | ForkOp):
            self.registry.record_turn(job.session.id, snapshot=f"snap-{job.turn_id}")
        if isinstance(job.op, PauseOp):  # the worker gives the sandbox up, as a real one does
            self.registry.release_lease(job.session.id, self.node)
        timings = {"worker_ms": 2.0, "sandbox_ms": 1.0}
        return TurnOutcome(
            turn_id=job.turn_id, node=self.node, ok=True, result=result, timings=timings
        )

    def _apply(self, job: TurnJob) -> TurnResult:
        op, sid = job.op, job.session.id
        if isinstance(op, ExecOp):
            req = op.request
            if req.argv == ["crash"]:
                raise SandboxLost("the sandbox agent's channel broke", operation="exec")
            out = " ".join(req.argv) if req.argv else (req.shell or req.python or "")
            code = 3 if req.argv and req.argv[0] == "false" else 0
            return ExecResult(exit_code=code, stdout=out + "\n", duration_ms=1.0, node=self.node)
        if isinstance(op, WriteOp):
            for f in op.files:
                raw = f.content
                self.files[(sid, f.path)] = (
                    base64.b64decode(raw).decode() if f.encoding == "base64" else raw
                )
            return WriteResult(written=len(op.files))
        if isinstance(op, ReadOp):
            content = self.files[(sid, op.path)]
            return FileRead(path=op.path, content=content, encoding="utf-8", size=len(content))
        if isinstance(op, ListOp):
            entries = [FileEntry(path=p, type="file") for (s, p) in self.files if s == sid]
            return FileList(entries=entries)
        if isinstance(op, DeleteOp):
            return DeleteResult(deleted=int(self.files.pop((sid, op.path), None) is not None))
        if isinstance(op, StatOp | MkdirOp | MoveOp):
            return self._entry_op(op, sid)
        if isinstance(op, TarUploadOp):
            self.files[(sid, "tar")] = op.data_b64
            return TarUploadResult(files=1)
        if isinstance(op, ForkOp):  # the store copies the source's latest snapshot
            for (owner, path), content in list(self.files.items()):
                if owner == op.source:
                    self.files[(sid, path)] = content
            self.registry.update(sid, snapshot=f"fork-of-{op.source}", last_turn=job.turn_id)
            return ForkResult(snapshot=f"fork-of-{op.source}", forked_from=op.source)
        if isinstance(op, LIFECYCLE_OPS):
            return self.checkpoints.apply(job)
        if isinstance(op, RunCodeOp):  # the kernel's answer: what was run, as Out
            return CodeResult(result=op.request.code, execution_count=1, node=self.node)
        if isinstance(op, TarDownloadOp):
            data = self.files.get((sid, "tar"), base64.b64encode(b"").decode())
            return TarDownloadResult(data_b64=data)
        return CloseResult()

    def _entry_op(self, op: StatOp | MkdirOp | MoveOp, sid: str) -> TurnResult:
        """stat, mkdir, move over the flat file map (a directory is a key ending ``/``)."""
        if isinstance(op, MkdirOp):
            created = (sid, op.path + "/") not in self.files
            self.files[(sid, op.path + "/")] = ""
            return MkdirResult(created=created)
        path = op.source if isinstance(op, MoveOp) else op.path
        if (sid, path) not in self.files:
            raise NotFound(f"path {path!r} does not exist", operation=op.kind)
        if isinstance(op, StatOp):
            return StatResult(entry=FileEntry(path=path, type="file"))
        self.files[(sid, op.destination)] = self.files.pop((sid, path))
        return MoveResult(entry=FileEntry(path=op.destination, type="file"))


#: The node that ``FakeNodes`` adds: it serves every type and never holds a turn.
CAPACITY_NODE = "fake-capacity"


class LapsingHolder(FakeWorker):
    """Attempt 1 is held by ``node``/``inc-a``; on the 2nd poll the node's record
    lapses and Redis changes under the API (``lapse``: a restart or a failover),
    the node beats again on the 6th poll, and attempt 1 is answered on the 8th:
    the holder never died."""

    polls = 0

    def lapse(self) -> None:
        raise NotImplementedError

    def wait(self, job: TurnJob, timeout: float) -> TurnOutcome | None:
        self.polls += 1
        if self.polls == 1:
            self.registry.receive_turn(job.turn_id, self.node, 1, "inc-a")
        if self.polls == 2:
            self.registry.redis.delete(names.node_key(self.node))
            self.lapse()
        if self.polls == 6:
            self.registry.heartbeat(self.node, 30, incarnation="inc-a", types=["python"])
        if self.polls >= 8:
            return super().wait(job, timeout)
        time.sleep(min(timeout, 0.05))
        return None


class FakeNodes:
    """The live nodes of Redis plus one that always serves every type.

    The fake worker runs turns only when the API waits for them, so it cannot
    beat on its own; this node keeps the API from refusing every type with
    ``no_capacity``, without showing in ``/v1/health`` (which reads Redis).
    Set ``capacity`` to False to see the grid as Redis alone shows it.
    """

    def __init__(self, ledger: RedisLedger) -> None:
        self.ledger = ledger
        self.capacity = True

    def node_records(self) -> dict[str, NodeRecord]:
        found = self.ledger.node_records()
        if self.capacity:
            found[CAPACITY_NODE] = NodeRecord(ts=0.0, inc="always")
        return found


class TestClientTransport(httpx.BaseTransport):
    """The SDK's httpx transport onto Starlette's ``TestClient``.

    Starlette's test client is built on ``httpx2`` when that is installed (the
    mcp and openai packages bring it), so its own transport is not one the
    SDK's ``httpx`` client can use; this one relays each request, whole.
    """

    def __init__(self, http: TestClient) -> None:
        self.http = http

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        reply = self.http.request(
            request.method,
            str(request.url),
            headers=[(k, v) for k, v in request.headers.multi_items() if k != "host"],
            content=request.read(),
        )
        headers = [(k, v) for k, v in reply.headers.multi_items() if k != "content-encoding"]
        return httpx.Response(reply.status_code, headers=headers, content=reply.content)


@dataclass
class Grid:
    """An in-process API with a fake worker and two tenants."""

    app: FastAPI
    http: TestClient
    services: Services
    worker: FakeWorker
    token_a: str
    token_b: str

    def client(self, token: str | None = None) -> Client:
        """An SDK client speaking to the in-process app."""
        return Client(
            "http://testserver",
            self.token_a if token is None else token,
            transport=TestClientTransport(self.http),
        )

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_a if token is None else token}"}

    def add_tenant(self, name: str, **limits: object) -> str:
        return self.services.tenants.add(name, TenantLimits.model_validate(limits))


def make_grid(client: redis.Redis[str], settings: Settings) -> Iterator[Grid]:
    with tempfile.TemporaryDirectory(prefix="sandgrid-records-") as records:
        yield from _grid(client, settings, LocalObjects(records))


def _grid(client: redis.Redis[str], settings: Settings, objects: ObjectStore) -> Iterator[Grid]:
    services = Services.build(settings, dispatcher=None, client=client, objects=objects)
    worker = FakeWorker(services.registry.ledger)
    services.runner.dispatcher = worker
    services.admission.nodes = NodeDirectory(FakeNodes(services.registry.ledger), cache_s=0)
    store = TenantStore(client, cache_s=0)
    token_a = store.add("acme")
    token_b = store.add("globex")
    app = create_app(settings, services=services)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Grid(app, http, services, worker, token_a, token_b)
