"""Metrics and the audit trail through a real grid (API, two workers, Flower).

Real turns go through the grid of ``tests.support.grid_fixtures``; then each
metric is read from the API's ``/metrics`` and from every node's ``/metrics``
(found through ``GET /v1/nodes``), the audit trail is read back through the
SDK (from Redis, then from the object store once the exporter moved it), and
Flower's ``/metrics`` is checked to need its password.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from sandgrid.client import Client
from sandgrid.errors import InvalidInput
from sandgrid.wire import names
from tests.support.grid_fixtures import (  # noqa: F401
    REDIS_URL,
    TOKEN,
    BatchGrid,
    batch_grid,
)

pytestmark = pytest.mark.integration

OPS_ENV = {
    "SANDGRID_WORKER__METRICS_PORT": "0",
    "SANDGRID_WORKER__METRICS_ADDR": "127.0.0.1",
    "SANDGRID_AUDIT__STREAM_KEEP_S": "0",
    "SANDGRID_AUDIT__EXPORT_INTERVAL_S": "1",
}
SECRET = "s3cr3t-env-value-never-audited"
CONTENT = "file-content-never-audited"


@pytest.fixture(scope="module")
def ops_env() -> Iterator[None]:
    """The grid's processes inherit these (LocalGrid copies os.environ)."""
    saved = {k: os.environ.get(k) for k in OPS_ENV}
    os.environ.update(OPS_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def grid(ops_env: None, batch_grid: BatchGrid) -> BatchGrid:  # noqa: F811
    return batch_grid


@pytest.fixture(scope="module")
def turns(grid: BatchGrid) -> str:
    """Real turns of one session: two execs, a write, a tar upload; then closed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = CONTENT.encode()
        info = tarfile.TarInfo("up.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with Client(grid.api_url, TOKEN) as client:
        with client.session(type="python") as s:
            assert s.exec(shell="echo hi", env={"TOKEN": SECRET}).exit_code == 0
            s.write_files({"f.txt": CONTENT})
            s.upload_tar(buf.getvalue())
            assert s.exec(shell="exit 3").exit_code == 3
            sid = s.id
        with pytest.raises(InvalidInput):
            client.create_session(type="python", quotas={"cpus": 16})
        batch = client.create_batch([{"id": "j1", "shell": "echo batch"}], type="python")
        deadline = time.monotonic() + 120
        while client.get_batch(batch.id).state not in ("done", "cancelled", "interrupted"):
            assert time.monotonic() < deadline, "batch did not finish"
            time.sleep(0.2)
    return sid


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


def _total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(
        v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())
    )


def test_api_metrics_count_the_turns_stages_rejections_and_batches(
    grid: BatchGrid, turns: str
) -> None:
    text = httpx.get(f"{grid.api_url}/metrics", timeout=10).text
    samples = _samples(text)
    assert _total(samples, "sandgrid_turns_total", op="exec", outcome="ok") >= 2
    assert _total(samples, "sandgrid_turns_total", op="write", outcome="ok") >= 1
    assert _total(samples, "sandgrid_turns_total", op="tar_upload", outcome="ok") >= 1
    for stage in ("api", "queue"):
        assert _total(samples, "sandgrid_turn_stage_seconds_count", stage=stage, op="exec") >= 2
    assert _total(samples, "sandgrid_admission_rejections_total", reason="quota") >= 1
    assert _total(samples, "sandgrid_batch_jobs_total", status="ok") >= 1
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"sandgrid_store_errors", "sandgrid_pool_sandboxes"} - families == {
        "sandgrid_pool_sandboxes"
    }  # the API's families only: the pool is the workers'


def test_every_node_lists_and_serves_its_metrics(grid: BatchGrid, turns: str) -> None:
    nodes = httpx.get(f"{grid.api_url}/v1/nodes", timeout=10).json()["nodes"]
    assert {n["name"] for n in nodes} == {"batch-w1", "batch-w2"}
    samples = []
    for node in nodes:
        assert node["metrics_url"].startswith("http://127.0.0.1:")
        samples += _samples(httpx.get(node["metrics_url"], timeout=10).text)
    assert _total(samples, "sandgrid_worker_turns_total", op="exec", outcome="ok") >= 2
    for stage in ("worker", "sandbox", "snapshot"):
        assert _total(samples, "sandgrid_worker_stage_seconds_count", stage=stage) >= 1
    assert _total(samples, "sandgrid_snapshot_seconds_count", direction="save") >= 1
    assert _total(samples, "sandgrid_snapshot_bytes_total", direction="save") > 0
    pool = [lab for n, lab, _ in samples if n == "sandgrid_pool_sandboxes"]
    assert {lab["state"] for lab in pool} == {"warm", "leased", "creating"}
    assert {lab["node"] for lab in pool} == {"batch-w1", "batch-w2"}
    assert _total(samples, "sandgrid_pool_sandboxes", state="warm") >= 1
    assert len([n for n, *_ in samples if n == "sandgrid_node_containers"]) == 2


def test_audit_records_each_action_once_without_contents(grid: BatchGrid, turns: str) -> None:
    with Client(grid.api_url, TOKEN) as client:
        page = client.audit(session=turns, order="asc")
    actions = [r.action for r in page.records]
    assert actions == ["session_create", "exec", "write", "tar_upload", "exec", "session_close"]
    first, second = page.records[1], page.records[4]
    assert first.command_digest == "sha256:" + hashlib.sha256(b"echo hi").hexdigest()
    assert first.command_head == "echo hi" and first.exit_code == 0 and first.node
    assert second.exit_code == 3 and second.outcome == "ok" and second.duration_ms
    assert page.records[2].bytes == len(CONTENT)
    assert {r.tenant for r in page.records} == {"batch"}
    dumped = page.model_dump_json()
    assert SECRET not in dumped and CONTENT not in dumped


def test_audit_is_exported_to_the_store_then_trimmed_and_still_read(
    grid: BatchGrid, turns: str
) -> None:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    store = grid.workdir / "grid" / "snapshots" / "t" / "batch" / "audit"
    deadline = time.monotonic() + 30
    while r.xlen(names.audit_key("batch")) or not list(store.rglob("*.jsonl")):
        assert time.monotonic() < deadline, "the exporter did not move the records"
        time.sleep(0.2)
    r.close()
    text = "".join(p.read_text() for p in store.rglob("*.jsonl"))
    assert turns in text and SECRET not in text and CONTENT not in text
    with Client(grid.api_url, TOKEN) as client:
        page = client.audit(session=turns)
        assert len(page.records) == 6 and page.records[0].action == "session_close"
        assert len(client.audit(session=turns, limit=2).records) == 2
        assert client.audit(session=turns, since=time.time() + 60).records == []


def test_flower_metrics_need_the_password(grid: BatchGrid) -> None:
    assert grid.flower("/metrics", auth=False).status_code == 401
    ok = grid.flower("/metrics")
    assert ok.status_code == 200 and "flower" in ok.text
