"""25.4: the shipped ``node`` and ``devbox`` types run on a real grid, as the README shows them.

A grid of its own (the API and one worker node serving ``node`` and ``devbox``,
the entries of ``deploy/types.toml`` whose ``template`` table
``deploy/local/images.sh`` builds at ``make services``). A session of each
runs ``node -e``, and the devbox's ``rg``, ``git``, ``gcc``, ``jq``, ``npm``
and ``python3``, on runc (their declared runtime); the same images under
gVisor are checked as types an operator adds with ``runtime = "runsc"``,
since a type names one runtime. The README's session of each runs as written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from sandgrid.localgrid import LocalGrid
from tests.support.grid_fixtures import own_grid

pytestmark = pytest.mark.integration

IMAGES = {"node": "sandgrid/sandbox-node:latest", "devbox": "sandgrid/sandbox-devbox:latest"}
NODE = "shipped-w1"
PORT = int(os.environ.get("SANDGRID_TEST_SHIPPED_API_PORT", "8753"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ACME, ADMIN = "tok-acme-" + "a" * 24, "tok-admin-" + "c" * 24
RUNTIMES = [
    pytest.param("runc", id="runc"),
    pytest.param("runsc", id="runsc", marks=pytest.mark.runsc),
]
#: What each type's session runs, and what its output must hold.
CHECKS = {
    "node": [
        ("node -e 'console.log([1, 2, 3].map(x => x * 7).join(\",\"))'", "7,14,21"),
        ("npm --version", "."),
        ("python3 -c 'print(6 * 7)'", "42"),
    ],
    "devbox": [
        ("rg --version", "ripgrep"),
        ("git --version", "git version"),
        ("node -e 'console.log(process.version)'", "v"),
        ("printf 'int main(){return 3;}' > a.c && gcc a.c -o a && ./a; echo rc=$?", "rc=3"),
        ("echo '{\"a\": [1, 2]}' | jq -c .a", "[1,2]"),
        ("python3 -c 'import sys; print(sys.version_info[0])'", "3"),
    ],
}


def _have_images() -> bool:
    client = docker.from_env()
    try:
        for image in IMAGES.values():
            client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    if not _have_images():
        pytest.fail("the shipped images are not built: run `make services` (images.sh)")
    work = tmp_path_factory.mktemp("shippedgrid")
    (work / "admin-token").write_text(ADMIN + "\n")
    env = {
        "SANDGRID_ADMIN_TOKEN_FILE": str(work / "admin-token"),
        "SANDGRID_HEARTBEAT_S": "0.5",
        "SANDGRID_TYPES_POLL_S": "0.5",
    }
    with own_grid(
        work,
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"acme": ACME},
        nodes=[NODE],
        types="node,devbox,node-*,devbox-*",
        env=env,
    ) as g:
        yield g


API = f"http://127.0.0.1:{PORT}"


def call(method: str, path: str, token: str = ACME, body: Any = None) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, API + path, json=body, headers=auth, timeout=120)


def node_types() -> set[str]:
    """The types the node's last heartbeat says it serves."""
    for node in httpx.get(API + "/v1/nodes", timeout=10).json()["nodes"]:
        if node["name"] == NODE:
            return set(node["types"])
    return set()


def test_the_shipped_types_are_entries_of_the_types_file(grid: LocalGrid) -> None:
    listed = {t["name"]: t for t in call("GET", "/v1/types").json()["types"]}
    for kind, image in IMAGES.items():
        assert listed[kind]["image"] == image and listed[kind]["runtime"] == "runc"
        assert listed[kind]["source"] == "file" and listed[kind]["digest"].startswith("sha256:")
        assert listed[kind]["pool_size"] == 1
    grid.wait(lambda: {"node", "devbox"} <= node_types(), "the node serving both")


@pytest.mark.parametrize("kind", sorted(CHECKS))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_session_of_each_shipped_type_runs_its_tools(
    grid: LocalGrid, kind: str, runtime: str
) -> None:
    name = kind
    if runtime == "runsc":  # the same image under gVisor: a type the operator adds
        name = f"{kind}-gvisor-t"
        body = {"name": name, "image": IMAGES[kind], "runtime": "runsc", "pool_size": 0}
        added = call("POST", "/v1/types", ADMIN, body)
        assert added.status_code in (201, 422), added.text  # 422: a rerun's, still there
    grid.wait(lambda: name in node_types(), f"the node serving {name}")
    made = call("POST", "/v1/sessions", body={"type": name})
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    try:
        for shell, expect in CHECKS[kind]:
            ran = call("POST", f"/v1/sessions/{sid}/exec", body={"shell": shell})
            assert ran.status_code == 200, ran.text
            out = ran.json()
            assert out["exit_code"] == 0, (shell, out)
            assert expect in out["stdout"], (shell, out)
            assert out["node"] == NODE
    finally:
        assert call("DELETE", f"/v1/sessions/{sid}").status_code == 200
    if runtime == "runsc":
        assert call("DELETE", f"/v1/types/{name}", ADMIN).status_code == 200


def test_the_readmes_session_of_each_runs_as_written(grid: LocalGrid) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in readme.split("```python\n")[1:] if 'type="devbox"' in b)
    code = "from sandgrid import Client\n" + block.split("```")[0]
    env = {**os.environ, "SANDGRID_API_URL": API, "SANDGRID_TOKEN": ACME}
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )
    assert ran.returncode == 0, ran.stderr
    assert "[ 7, 14, 21 ]" in ran.stdout and "ripgrep" in ran.stdout and "gcc" in ran.stdout
