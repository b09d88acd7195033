"""A real Prometheus scrapes a real grid with the shipped config (issue 23.18).

Debian's ``prometheus`` (``make services`` installs it) runs on a free loopback
port with a temporary data directory, with ``deploy/prometheus/prometheus.yml``
pointed at this module's grid (API, two workers whose ``/metrics`` ports are
whatever each got, Flower). The workers are found only through the API's
service discovery (``GET /v1/metrics/targets``), so every target is ``up`` only
when discovery names each node. The binary missing is a skip on a developer's
machine and a failure in CI (``CI=true``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.grid_fixtures import (  # noqa: F401
    FLOWER_PASSWORD,
    NODES,
    BatchGrid,
    batch_grid,
)
from tests.support.listeners import listen_addresses

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy/prometheus/prometheus.yml"
METRICS_TOKEN = "sgm_prometheus-grid-test-token"
UP_WITHIN_S = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        reason = f"{name} is not installed (deploy/local/prometheus.sh: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: required in CI")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The metrics token the API checks, set before the grid starts (it copies os.environ)."""
    d = tmp_path_factory.mktemp("promsecrets")
    (d / "sandgrid-metrics-token").write_text(METRICS_TOKEN + "\n")
    (d / "flower-password").write_text(FLOWER_PASSWORD + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SANDGRID_METRICS_TOKEN_FILE", str(d / "sandgrid-metrics-token"))
        yield d


@pytest.fixture(scope="module")
def grid(secrets_dir: Path, batch_grid: BatchGrid) -> BatchGrid:  # noqa: F811
    return batch_grid


def _render(grid: BatchGrid, secrets: Path) -> dict[str, Any]:
    """The shipped config, its addresses and credential files pointed at this grid."""
    api = grid.api_url.removeprefix("http://")
    flower = grid.flower_url.removeprefix("http://")
    text = SHIPPED.read_text().replace("127.0.0.1:8700", api).replace("127.0.0.1:5555", flower)
    text = text.replace("/etc/prometheus/", f"{secrets}/")
    conf: dict[str, Any] = yaml.safe_load(text)
    conf["global"]["scrape_interval"] = "1s"
    for job in conf["scrape_configs"]:
        for sd in job.get("http_sd_configs", []):
            sd["refresh_interval"] = "1s"
    return conf


@pytest.fixture(scope="module")
def prometheus(
    grid: BatchGrid, secrets_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    binary = _binary("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(_render(grid, secrets_dir)))
    port = _free_port()
    with (work / "prometheus.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_promtool_accepts_the_shipped_config() -> None:
    run = subprocess.run(
        [_binary("promtool"), "check", "config", str(SHIPPED)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _targets(prom: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"{prom}/api/v1/targets", params={"state": "active"}, timeout=5)
    except httpx.HTTPError:
        return []
    return list(r.json()["data"]["activeTargets"]) if r.status_code == 200 else []


def test_every_target_is_up(prometheus: str, grid: BatchGrid) -> None:
    """The API, Flower and each worker (found by service discovery) are scraped and up."""
    want = {("sandgrid-api", ""), ("flower", "")} | {("sandgrid-workers", n) for n in NODES}
    deadline = time.monotonic() + UP_WITHIN_S
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = _targets(prometheus)
        up = {
            (t["labels"]["job"], t["labels"].get("node", "")) for t in seen if t["health"] == "up"
        }
        if want <= up:
            break
        time.sleep(0.5)
    else:
        brief = [(t["labels"], t["health"], t.get("lastError")) for t in seen]
        pytest.fail(f"not every target up within {UP_WITHIN_S}s: {brief}")
    workers = [t for t in seen if t["labels"]["job"] == "sandgrid-workers"]
    assert len(workers) == len(NODES)
    # 23.3: each node's /metrics socket is bound to loopback only
    for t in workers:
        port = int(t["labels"]["instance"].rsplit(":", 1)[1])
        assert listen_addresses(port) == {"127.0.0.1"}, t["labels"]
