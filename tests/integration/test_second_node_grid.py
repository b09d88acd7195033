"""A node of the second Docker engine on a real grid (issue 25, items 3 and 6).

The second engine is ``deploy/local/docker2.sh``'s (its own data root, no
bridge), emptied when the module starts: a node on it has no image until it
pulls one from the grid's registry (127.0.0.1:5000, ``make services``).

- Its warm pool stays warm: the types it serves are added at runtime (its
  ``--types`` pattern matches none at start), so each runtime's backend is made
  after the node started; its reaper must still list that backend's containers,
  or it takes every warm sandbox for gone at each pass (the "warm sandbox ... is
  gone" of docs/performance.md).
- A template built on the main node (a step that pip-installs from a local index
  on 127.0.0.27 through the egress proxy) runs on the main node, then (the main
  node stopped) on a node of the second engine emptied of every image, which
  pulls the template's image from the registry and logs that pull; on runc (a
  type an operator adds with the template's image) and on runsc (the template's
  own runtime). Sessions go through the SDK (``client.templates``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgrid import Client
from sandgrid.localgrid import LocalGrid
from sandgrid.templates import TemplateInfo
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.chaos.services import PrivateDockerd, free_port
from tests.integration.test_image_registry_grid import (  # noqa: F401
    _clean,
    _pulls,
    engine2,
    registry_up,
)
from tests.integration.test_logs_grid import GRID_ENV, REDIS_URL, _empty_db
from tests.integration.test_templates_grid import _drop_images
from tests.support.egress_servers import build_wheel, pypi_server
from worker.quotas import LABEL_WORKER

pytestmark = pytest.mark.integration

MAIN, SECOND = "sn-main", "sn-d2"
ACME = "tok-acme-" + "e" * 24
ADMIN = "tok-admin-" + "f" * 24
IMAGE = "sandgrid/sandbox-python:latest"
PYPI = "127.0.0.27"
PIP_POLICY = {"allow": ["pypi.test", PYPI]}
PIP = "pip install -q --trusted-host pypi.test --index-url http://pypi.test/simple demo-pkg"
REAP_S = 1.0
RUNTIMES = [
    pytest.param("runc", id="runc"),
    pytest.param("runsc", id="runsc", marks=pytest.mark.runsc),
]


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[LocalGrid]:
    """The API alone, reaping each second; tenant ``acme`` may use the local index."""
    db = _empty_db()
    netco = TenantLimits(allow_network=True, network_ceiling=[PYPI, "pypi.test"], max_image_mb=4096)
    db.hset(
        names.tokens_key(), hash_token(ACME), Tenant(name="acme", limits=netco).model_dump_json()
    )
    (tmp_path / "admin-token").write_text(ADMIN + "\n")
    egress = Path(tempfile.mkdtemp(prefix="sgsn-"))  # short: its Unix sockets' paths
    port = free_port()
    env = {
        **GRID_ENV,
        "SANDGRID_ADMIN_TOKEN_FILE": str(tmp_path / "admin-token"),
        "SANDGRID_WORKER__EGRESS__STATE_DIR": str(egress),
        "SANDGRID_WORKER__EGRESS__HOSTS": json.dumps({"pypi.test": PYPI}),
        "SANDGRID_WORKER__REAP_INTERVAL_S": str(REAP_S),
        "SANDGRID_HEARTBEAT_S": "0.5",
        "SANDGRID_TYPES_POLL_S": "0.5",
        "SANDGRID_API_PORT": str(port),  # the nodes' egress guard knows the API's port
    }
    g = LocalGrid(tmp_path / "grid", port=port, redis_url=REDIS_URL, tenants={}, env=env)
    with contextlib.ExitStack() as undo:  # run last first: the grid, then the DB, the sockets
        undo.callback(shutil.rmtree, egress, ignore_errors=True)
        undo.callback(db.close)
        undo.callback(db.flushdb)
        undo.callback(g.stop)
        g.spawn("api", "serve", "--host", "127.0.0.1", "--port", str(port))
        g.wait(lambda: httpx.get(f"{g.api_url}/v1/health", timeout=2).is_success, "the API")
        yield g


def call(grid: LocalGrid, method: str, path: str, token: str = ACME, body: Any = None) -> Any:
    auth = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, grid.api_url + path, json=body, headers=auth, timeout=180)


def node_row(grid: LocalGrid, node: str) -> dict[str, Any]:
    """``node``'s row of ``GET /v1/nodes`` (its private types shown: the operator's token)."""
    rows = call(grid, "GET", "/v1/nodes", ADMIN).json()["nodes"]
    return next((row for row in rows if row["name"] == node), {})


def serves(grid: LocalGrid, node: str) -> set[str]:
    """The types ``node``'s last heartbeat says it serves."""
    return set(node_row(grid, node).get("types") or [])


def warm_ids(engine: PrivateDockerd, kind: str) -> set[str]:
    """Running warm (no session's) containers of type ``kind`` on the second engine."""
    client = engine.client()
    try:
        rows = client.api.containers(filters={"label": [f"sandgrid.type={kind}"]})
        return {r["Id"] for r in rows if not (r.get("Labels") or {}).get("sandgrid.session")}
    finally:
        client.close()


def _drop_second(engine: PrivateDockerd) -> None:
    """The second node's containers, left by a killed node (its stop removes its own)."""
    client = engine.client()
    try:
        for c in client.api.containers(all=True, filters={"label": f"{LABEL_WORKER}={SECOND}"}):
            client.api.remove_container(c["Id"], force=True)
    finally:
        client.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_second_engine_node_keeps_its_warm_pool_across_reaper_passes(
    grid: LocalGrid,
    engine2: PrivateDockerd,  # noqa: F811 - the fixture imported above
    runtime: str,
) -> None:
    kind = f"snw-{runtime}"
    grid.start_worker(SECOND, types="snw-*", concurrency=2, env={"DOCKER_HOST": engine2.host})
    try:
        grid.wait(lambda: SECOND in grid.workers_seen(), f"{SECOND} in /v1/health")
        body = {"name": kind, "image": IMAGE, "runtime": runtime, "pool_size": 1}
        added = call(grid, "POST", "/v1/types", ADMIN, body)
        assert added.status_code == 201, added.text
        grid.wait(lambda: kind in serves(grid, SECOND), f"{SECOND} serving {kind}", timeout=600)
        grid.wait(lambda: len(warm_ids(engine2, kind)) == 1, f"a warm {kind}", timeout=300)
        first = warm_ids(engine2, kind)
        time.sleep(6 * REAP_S + 1)  # several reaper passes
        assert warm_ids(engine2, kind) == first  # the same sandbox, still warm
        log = (grid.workdir / f"{SECOND}.log").read_text()
        assert "is gone (the runtime restarted?)" not in log, log[-4000:]
        made = call(grid, "POST", "/v1/sessions", body={"type": kind})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        ran = call(grid, "POST", f"/v1/sessions/{sid}/exec", body={"shell": "echo warm"}).json()
        assert (ran["node"], ran["stdout"]) == (SECOND, "warm\n"), ran
        call(grid, "DELETE", f"/v1/sessions/{sid}")
    finally:
        grid.kill(SECOND, signal.SIGTERM)
        _drop_second(engine2)


def _ready(client: Client, grid: LocalGrid, definition: dict[str, Any]) -> TemplateInfo:
    """Build ``definition`` through the SDK and follow it to its end."""
    assert client.templates.build(definition).state == "building"
    seen: list[TemplateInfo] = []

    def ended() -> bool:
        seen.append(client.templates.get(definition["name"]))
        return seen[-1].state in ("ready", "failed")

    grid.wait(ended, f"template {definition['name']} built", timeout=600)
    assert seen[-1].state == "ready", seen[-1].model_dump_json()
    return seen[-1]


def _imports_the_package(client: Client, kind: str, node: str) -> None:
    """A session of ``kind`` runs on ``node`` and imports what the build installed."""
    with client.session(type=kind) as session:
        out = session.exec(shell="python3 -c 'import demo_pkg; print(demo_pkg.HELLO)'")
    assert (out.exit_code, out.stdout, out.node) == (0, "from the index\n", node), out


@pytest.mark.runsc  # builds run under gVisor
@pytest.mark.timeout(1800)
def test_a_template_runs_on_each_node_and_the_second_engine_pulls_it_from_the_registry(
    grid: LocalGrid,
    engine2: PrivateDockerd,  # noqa: F811 - the fixture imported above
) -> None:
    kind, on_runc = "sntpl-demo", "sntpl-demo-runc"
    packages = grid.workdir / "packages"
    build_wheel(packages)
    client = Client(grid.api_url, ACME, timeout=300)
    try:
        grid.start_worker(MAIN, types="python,python-gvisor,sntpl-*", concurrency=2)
        grid.wait(lambda: "python-gvisor" in serves(grid, MAIN), f"{MAIN} serving gVisor")
        with pypi_server(PYPI, 80, packages, grid.workdir / "pypi.log"):
            body = {"name": kind, "from": "python", "steps": [{"run": PIP}], "network": PIP_POLICY}
            info = _ready(client, grid, body)
        image, digest = info.image or "", info.digest or ""
        assert image.startswith("127.0.0.1:5000/") and digest.startswith("sha256:")
        runc = {"name": on_runc, "image": image, "digest": digest, "runtime": "runc"}
        added = call(grid, "POST", "/v1/types", ADMIN, {**runc, "pool_size": 0, "tenant": "acme"})
        assert added.status_code == 201, added.text
        grid.wait(lambda: {kind, on_runc} <= serves(grid, MAIN), f"{MAIN} serving both")
        for name in (on_runc, kind):  # runc, then runsc (the template's own runtime)
            _imports_the_package(client, name, MAIN)

        grid.kill(MAIN, signal.SIGTERM)  # from now on only the second engine's node serves them
        engine = engine2.client()
        try:
            _clean(engine)  # no image at all there: the template's comes from the registry
            grid.start_worker(
                SECOND, types="sntpl-*", concurrency=2, env={"DOCKER_HOST": engine2.host}
            )
            grid.wait(
                lambda: {kind, on_runc} <= serves(grid, SECOND),
                f"{SECOND} serving both",
                timeout=600,
            )
            for name in (on_runc, kind):
                _imports_the_package(client, name, SECOND)
            pulled = [
                ln
                for ln in (grid.workdir / f"{SECOND}.log").read_text().splitlines()
                if "image pull: " in ln
            ]
            assert len(pulled) == 1, pulled  # one pull, for both types: by the template's digest
            assert f"reference={image.rsplit(':', 1)[0]}" in pulled[0], pulled
            assert "outcome=ok" in pulled[0] and f"node={SECOND}" in pulled[0], pulled
            exposed = httpx.get(node_row(grid, SECOND)["metrics_url"], timeout=10).text
            repository = image.split("/", 1)[1].rsplit(":", 1)[0]  # sandgrid/tpl-acme-...
            assert _pulls("private", exposed) == 1, exposed  # its /metrics reports it too,
            assert repository not in exposed  # as a tenant's: never by its name or tenant
        finally:
            engine.close()
    finally:
        client.close()
        if SECOND in grid.procs:
            grid.kill(SECOND, signal.SIGTERM)
        _drop_second(engine2)
        call(grid, "DELETE", f"/v1/types/{on_runc}", ADMIN)
        call(grid, "DELETE", f"/v1/templates/{kind}")
        _drop_images()  # the main engine's tags of the template
