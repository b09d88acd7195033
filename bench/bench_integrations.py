"""What the integrations add to a turn, measured in one run against one grid.

    python3 bench/bench_integrations.py [--turns 100] [--runtimes runc,runsc]

Starts its own grid (API on 127.0.0.1:8732, two worker nodes, Redis db 13 or
``--redis-url``), then, per runtime (``python`` on runc, ``python-gvisor`` on
runsc), times a warm session's turn of ``true`` each way, in this order:

1. the REST API through the SDK (``Client.exec``): the baseline;
2. the MCP ``exec`` tool through the ``mcp`` client library (stateless, JSON);
3. the OpenAI Agents SDK provider (``SandboxSession.exec``, which adds the
   SDK's ``sh -lc`` wrapper, the exact-bytes wrapper and its instrumentation);
4. AgentScope Runtime's ``POST /call_tool`` of ``run_shell_command`` over
   HTTP, as its client sends it (runc only: the runtime's ``base`` type is the
   grid's ``python`` unless the API is told otherwise);
5. AgentScope 2.0's ``SandgridBackend.exec_shell`` (its ``sh`` wrapper for
   bytes-exact output and ``cwd``), in AgentScope's own venv
   (``SANDGRID_AGENTSCOPE2_VENV``, default ``/work/.agentscope2/venv``, made by
   its tests), against ``AsyncClient.exec`` timed in that same process: its
   ratio is to that baseline.

It prints the median and p95 of each and their ratios to the baseline of the
same runtime, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _grid import bench_grid
from _stats import pct, timed_async
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sandgrid.client import AsyncClient, Client
from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
)

PORT = 8732
REDIS_URL = "redis://127.0.0.1:6379/13"
TYPES = {"runc": "python", "runsc": "python-gvisor"}
RATIOS: dict[tuple[str, str], float] = {}
"""Ratios measured against a baseline of their own (``*`` rows), not the REST row."""
TOKEN = "tok-bench-" + "x" * 24


def rest_turns(api: str, n: int, sbx_type: str) -> list[float]:
    with Client(api, TOKEN) as client, client.session(type=sbx_type) as s:

        async def turn() -> object:
            return s.exec(argv=["true"])

        return asyncio.run(timed_async(n, turn))


async def mcp_turns(api: str, n: int, sbx_type: str) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{api}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        created = await mcp.call_tool("create_session", {"type": sbx_type})
        sid = (created.structured_content or {})["id"]
        args = {"session_id": sid, "argv": ["true"]}
        times = await timed_async(n, lambda: mcp.call_tool("exec", args))
        await mcp.call_tool("close_session", {"session_id": sid})
        return times


async def provider_turns(api: str, n: int, sbx_type: str) -> list[float]:
    async with AsyncClient(api, TOKEN) as sdk:
        client = SandgridSandboxClient(client=sdk)
        options = SandgridSandboxClientOptions(sandbox_type=sbx_type)
        async with await client.create(options=options) as s:
            return await timed_async(n, lambda: s.exec("true"))


async def agentscope_runtime_turns(api: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=api, headers=headers, timeout=60) as http:
        made = await http.post("/create_from_pool", json={"sandbox_type": "base"})
        box = made.json()["data"]
        body = {"identity": box, "tool_name": "run_shell_command", "arguments": {"command": "true"}}

        async def turn() -> object:
            r = await http.post("/call_tool", json=body)
            assert r.status_code == 200, r.text
            return r

        try:
            return await timed_async(n, turn)
        finally:
            await http.post("/release", json={"identity": box})


AGENTSCOPE2_VENV = Path(os.environ.get("SANDGRID_AGENTSCOPE2_VENV", "/work/.agentscope2/venv"))


def agentscope2_ratio(api: str, n: int, sbx_type: str) -> tuple[list[float], float] | None:
    """AgentScope 2.0's turns and their p50 over the plain client's, both timed in
    its venv; None when that venv is missing."""
    python = AGENTSCOPE2_VENV / "bin" / "python"
    if not python.exists():
        print(f"AgentScope 2.0: no venv at {AGENTSCOPE2_VENV} (its tests make it); skipped")
        return None
    script = Path(__file__).with_name("_agentscope2_turns.py")
    out = subprocess.run(
        [str(python), str(script), api, TOKEN, sbx_type, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return times["adapter"], statistics.median(times["adapter"]) / statistics.median(times["plain"])


def runtime_rows(api: str, n: int, runtime: str) -> dict[str, list[float]]:
    """Each path's turn times on sessions of the runtime's type, baseline first."""
    sbx_type = TYPES[runtime]
    rows = {
        "REST (Client.exec)": rest_turns(api, n, sbx_type),
        "MCP exec tool": asyncio.run(mcp_turns(api, n, sbx_type)),
        "OpenAI Agents provider": asyncio.run(provider_turns(api, n, sbx_type)),
    }
    if runtime == "runc":
        rows["AgentScope Runtime call_tool"] = asyncio.run(agentscope_runtime_turns(api, n))
    as2 = agentscope2_ratio(api, n, sbx_type)
    if as2 is not None:
        rows["AgentScope 2.0 backend *"] = as2[0]
        RATIOS[(runtime, "AgentScope 2.0 backend *")] = as2[1]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--runtimes", default="runc,runsc")
    parser.add_argument("--redis-url", default=REDIS_URL)
    args = parser.parse_args()
    runtimes = [r for r in args.runtimes.split(",") if r]
    with bench_grid(
        port=PORT,
        redis_url=args.redis_url,
        token=TOKEN,
        nodes=["bi-w1", "bi-w2"],
        concurrency=2,
        types=",".join(TYPES[r] for r in runtimes),
    ) as grid:
        results = {rt: runtime_rows(grid.api_url, args.turns, rt) for rt in runtimes}
    for runtime, rows in results.items():
        base = statistics.median(rows["REST (Client.exec)"])
        print(f"{runtime}: warm turn of `true`, {args.turns} turns each (ms)")
        print(f"  {'path':<30}{'p50':>8}{'p95':>8}{'p50 / REST':>12}")
        for name, times in rows.items():
            p50 = statistics.median(times)
            ratio = RATIOS.get((runtime, name), p50 / base)
            print(f"  {name:<30}{p50:8.1f}{pct(times, 95):8.1f}{ratio:12.2f}")
    if RATIOS:
        print("  * against AsyncClient.exec timed in the same process (AgentScope's venv)")


if __name__ == "__main__":
    main()
