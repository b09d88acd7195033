"""agentscope-runtime 1.1.6's own client against a real grid.

The client runs in a virtual environment of its own (its dependencies are heavy
and pin versions of their own): ``SANDGRID_AGENTSCOPE_VENV``, by default
``/work/.agentscope/venv``, made here with ``python3 -m venv`` and
``pip install agentscope-runtime==1.1.6`` when it is missing (that needs PyPI).
``tests/support/agentscope_client.py`` drives ``BaseSandbox``,
``BaseSandboxAsync``, ``SandboxService`` and ``SandboxManager`` (every remote
method and its ``_async`` twin) with ``base_url=`` this module's grid and writes
what they returned as JSON; the tests assert on it. Everything runs on runc and
on runsc: the grid serves AgentScope's sandboxes with the type
``SANDGRID_AGENTSCOPE_GRID_TYPE`` names (``python``, ``python-gvisor``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from sandgrid.localgrid import LocalGrid
from scheduler.api.compat import agentscope
from tests.support.one_node_grid import flushed_redis

pytestmark = pytest.mark.integration

AGENTSCOPE_VERSION = "1.1.6"
VENV = Path(os.environ.get("SANDGRID_AGENTSCOPE_VENV", "/work/.agentscope/venv"))
PORT = int(os.environ.get("SANDGRID_TEST_AGENTSCOPE_PORT", "8717"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-ascope-" + "e" * 24
CLIENT = Path(__file__).parents[1] / "support" / "agentscope_client.py"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def agentscope_python() -> Path:
    """The python of a venv with agentscope-runtime; made (with pip) when missing."""
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", "import agentscope_runtime.sandbox"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        pip = [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            f"agentscope-runtime=={AGENTSCOPE_VERSION}",
        ]
        subprocess.run(pip, check=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        _unavailable(f"cannot make the agentscope-runtime venv at {VENV}: {exc}")
    return python


RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]


@pytest.fixture(scope="module", params=RUNTIMES)
def grid(
    request: pytest.FixtureRequest, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalGrid]:
    """API + one worker serving AgentScope's sandboxes with one grid type (runc or runsc)."""
    grid_type = str(request.param)
    env = {
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
        "SANDGRID_WORKER__METRICS_PORT": "0",
        "SANDGRID_AGENTSCOPE_GRID_TYPE": grid_type,
    }
    with flushed_redis(REDIS_URL):
        where = tmp_path_factory.mktemp(f"ascope-{grid_type}")
        g = LocalGrid(where, port=PORT, redis_url=REDIS_URL, tenants={"ascope": TOKEN}, env=env)
        try:
            g.start(["ascope-w1"], types=grid_type, concurrency=4)
            yield g
        finally:
            g.stop()


@pytest.fixture(scope="module")
def ran(grid: LocalGrid, agentscope_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """What agentscope's own client got from the grid (one run for the module)."""
    out = tmp_path_factory.mktemp("ascope-out") / "out.json"
    argv = [str(agentscope_python), str(CLIENT), grid.api_url, TOKEN, str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert proc.returncode == 0, f"{proc.stderr[-4000:]}\n{grid.logs()}"
    return json.loads(out.read_text())


def test_every_remote_wrapper_route_is_served(ran: Any) -> None:
    """The runtime's own list of remote routes (its decorator's marks) is exactly what we serve."""
    served = {
        f"{method} {route.path}"
        for route in agentscope.router.routes
        if isinstance(route, APIRoute) and not route.path.startswith("/proxy/")
        for method in route.methods
    }
    wanted = set(ran["routes"])
    assert len(wanted) == 28 and "POST /add_mcp_servers_async" in wanted  # 14 methods, 2 ways
    assert served - {"GET /health"} == wanted


def test_sandbox_lifecycle_and_info(ran: Any) -> None:
    box = ran["sandbox"]
    assert box["sandbox_id"].startswith("s-")
    info = box["info"]
    assert info["container_name"] == box["sandbox_id"] and "base" in info["version"]
    assert info["meta"]["session_ctx_id"]
    assert box["tools"] == ["run_ipython_cell", "run_shell_command"]
    assert box["health"] is True and box["released_health"] is False


def test_tools_answer_mcp_results(ran: Any) -> None:
    box = ran["sandbox"]
    assert box["shell"] == {
        "isError": True,
        "texts": {"stdout": "hello\n", "stderr": "oops\n", "returncode": "3"},
    }
    assert box["ipython"] == {"isError": False, "texts": {"stdout": "45\n"}}
    assert box["ipython_state"] == {"isError": False, "texts": {"stdout": "90\n"}}  # kept
    err = box["ipython_error"]
    assert err["isError"] is True and "ZeroDivisionError" in err["texts"]["stderr"]


def test_workspace_file_routes(ran: Any) -> None:
    box = ran["sandbox"]
    assert box["write"]["path"] == "/workspace/notes/a.txt" and box["write"]["size"] == 5
    assert box["read"] == "alpha" and box["read_bytes"] == b"alpha".hex()
    assert [e["path"] for e in box["write_many"]] == ["/workspace/b.bin", "/workspace/notes/c.txt"]
    listed = {e["path"]: e for e in box["list"]}
    assert set(listed) == {
        "/workspace/b.bin",
        "/workspace/notes",
        "/workspace/notes/a.txt",
        "/workspace/notes/c.txt",
    }
    assert listed["/workspace/notes"]["type"] == "dir" and listed["/workspace/b.bin"]["size"] == 2
    assert box["exists"] == [True, False] and box["mkdir"] == [True, False]
    assert box["move"]["path"] == "/workspace/moved/a.txt" and box["move"]["type"] == "file"
    assert box["after"] == ["/workspace/b.bin", "/workspace/made", "/workspace/moved"]
    assert box["shell_sees"]["texts"]["stdout"].split() == ["alpha", "00", "ff"]


def test_async_sandbox_and_positional_twins(ran: Any) -> None:
    aio = ran["async"]
    assert aio["info_name"] == aio["sandbox_id"]
    assert aio["ran"]["texts"]["stdout"] == "async\n"


def test_sandbox_service_maps_session_contexts(ran: Any) -> None:
    svc = ran["service"]
    assert svc["again"] == svc["first"] == svc["mapping"] and len(svc["first"]) == 1
    assert svc["again_class"] == "BaseSandbox"
    assert svc["ran"]["texts"]["stdout"] == "svc\n"
    assert svc["after_release"] == []
    assert svc["fs_classes"] == ["FilesystemSandbox", "FilesystemSandbox"] and svc["fs_same"]
    assert svc["fs_ran"] == "Allowed directories:\n/workspace"
    assert svc["drained_health"] == [False]


def test_lifecycle_methods(ran: Any) -> None:
    """create, get_status, stop, start, cleanup: the runtime's answers, in Docker's words."""
    life = ran["lifecycle"]
    assert life["env"]["isError"] is False  # environment= reached the sandbox
    assert life["kept"]["texts"]["stdout"] == "seen\n"  # stop then start kept the workspace
    assert life["created"] in ("created", "running") and life["running"] == "running"
    assert (life["stop"], life["stopped"]) == (True, "exited")
    assert (life["start"], life["started"]) == (True, "running")
    assert life["unknown"] == [None, False, True]  # as the runtime's, for an unknown identity
    assert life["cleanup"] is None and life["after_cleanup"] == [None, None]
    assert life["health_after"] == [False, False]


def test_lifecycle_async_twins(ran: Any) -> None:
    life = ran["lifecycle_async"]
    assert life["created"] in ("created", "running") and life["running"] == "running"
    assert (life["stop"], life["stopped"]) == (True, "exited")
    assert (life["start"], life["started"]) == (True, "running")
    assert life["kept"]["texts"]["stdout"] == "a\n"
    assert life["cleanup"] is None and life["after_cleanup"] is None


def test_refusals_as_the_client_sees_them(ran: Any) -> None:
    """add_mcp_servers is 501 and an unserved type 422, each named in the client's string."""
    for life in (ran["lifecycle"], ran["lifecycle_async"]):
        assert life["mcp"].startswith("Error: HTTP 501")
        assert "Error in add_mcp_servers" in life["mcp"] and "MCP" in life["mcp"]
        assert life["bad_type"].startswith("Error: HTTP 422") and "sandbox_type" in life["bad_type"]
    assert "training-environment service" in ran["lifecycle"]["bfcl"]  # the reason, said
    assert "Server Detail: Error in create: sandbox_type 'gui'" in ran["lifecycle"]["bad_type"]
    assert "Error in create_from_pool_async: " in ran["lifecycle_async"]["bad_type"]


def test_file_api_status_codes(ran: Any) -> None:
    """The runtime's codes: 404 missing/dir read and listing, 409 over a dir, 204 remove."""
    codes = ran["file_codes"]
    assert codes == {
        "read_missing": 404,
        "read_dir": 404,
        "list_missing": 404,
        "list_file": 404,
        "write_dir": 409,
        "write_many_dir": 409,
        "remove_missing": "ok",
        "mkdir_file": 409,
        "move_missing": 404,
        "detail": "not found",
    }
    assert ran["file_codes_async"] == {
        "read_missing": 404,
        "read_dir": 404,
        "list_missing": 404,
        "write_dir": 409,
        "remove_missing": "ok",
    }


def test_output_over_the_cap_is_an_error(ran: Any) -> None:
    """More than 1 MiB of output: cut at the grid's cap, ``isError`` and the cut named."""
    cut = ran["truncation"]
    for name in ("stdout", "async"):
        assert cut[name]["isError"] is True and "stdout" in cut[name]["error"]
        assert cut[name]["sizes"]["stdout"] == 1 << 20
    assert cut["stderr"]["isError"] is True and "stderr" in cut["stderr"]["error"]
    assert cut["cell"]["isError"] is True and "cut" in cut["cell"]["stderr"]
    assert cut["small"]["isError"] is False and "error" not in cut["small"]["sizes"]


def test_filesystem_sandbox_tools(ran: Any) -> None:
    """FilesystemSandbox's methods, answered as the MCP filesystem server answers them."""
    fs = ran["filesystem"]
    assert fs["tools"] == [
        "create_directory", "directory_tree", "edit_file", "get_file_info",
        "list_allowed_directories", "list_directory", "move_file", "read_file",
        "read_multiple_files", "search_files", "write_file",
    ]  # fmt: skip
    assert "filesystem" in fs["info_version"]  # SandboxService finds FilesystemSandbox by it
    ok = {
        k: v["text"]
        for k, v in fs.items()
        if isinstance(v, dict) and v.get("isError") is False and "text" in v
    }
    assert ok["mkdir"] == "Successfully created directory /workspace/src/pkg"
    assert ok["write"] == "Successfully wrote to /workspace/src/pkg/mod.py"
    assert ok["read"] == "alpha\nbeta\n"
    assert (
        ok["list"] == "[FILE] notes.txt\n[DIR] pkg" or ok["list"] == "[DIR] pkg\n[FILE] notes.txt"
    )
    assert json.loads(ok["tree"]) == [
        {"name": "notes.txt", "type": "file"},
        {"name": "pkg", "type": "directory", "children": [{"name": "mod.py", "type": "file"}]},
    ]
    assert ok["dry"].startswith("```diff") and "+    return 2" in ok["dry"]
    assert ok["after_dry"] == "def f():\n    return 1\n"  # a dry run writes nothing
    assert ok["edited"] == "def f():\n    return 2\n"
    assert ok["search"] == "/workspace/src/pkg/mod.py" and ok["search_none"] == "No matches found"
    assert ok["info"].startswith("size: 11\ncreated: ") and "isFile: true" in ok["info"]
    assert ok["move"] == "Successfully moved src/notes.txt to src/moved.txt"
    assert ok["allowed"] == "Allowed directories:\n/workspace"
    many = ok["read_many"].split("\n---\n")
    assert many[0] == "src/notes.txt:\nalpha\nbeta\n\n" and many[1].startswith(
        "src/nope.txt: Error - "
    )
    for failed in ("bad_edit", "move_again", "missing", "outside"):
        assert fs[failed]["isError"] is True and fs[failed]["text"].startswith("Error: "), failed
    assert "Could not find exact match" in fs["bad_edit"]["text"]
    assert fs["shell_sees"]["texts"]["stdout"] == "alpha\nbeta\ndef f():\n    return 2\n"
    aio = ran["filesystem_async"]
    assert aio["read"] == {"isError": False, "text": "async"}
    assert aio["list"] == {"isError": False, "text": "[FILE] b.txt"}
