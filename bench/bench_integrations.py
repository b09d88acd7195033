"""What the integrations add to a turn, measured in one run against one grid.

    python3 bench/bench_integrations.py [--turns 100]

Starts its own grid (API on 127.0.0.1:8732, two worker nodes, Redis db 13),
then times a warm session's turn of ``true`` three ways, in this order:

1. the REST API through the SDK (``Client.exec``): the baseline;
2. the MCP ``exec`` tool through the ``mcp`` client library (stateless, JSON);
3. the OpenAI Agents SDK provider (``SandboxSession.exec``, which adds the
   SDK's ``sh -lc`` wrapper and its event instrumentation).

It prints the median and p95 of each and their ratios to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _grid import bench_grid
from _stats import pct
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sandgrid.client import AsyncClient, Client
from sandgrid.integrations.openai_agents import SandgridSandboxClient

PORT = 8732
REDIS_URL = "redis://127.0.0.1:6379/13"
TOKEN = "tok-bench-" + "x" * 24
WARMUP = 10


async def _timed(n: int, turn: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(WARMUP):
        await turn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await turn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def rest_turns(api: str, n: int) -> list[float]:
    with Client(api, TOKEN) as client, client.session() as s:

        async def turn() -> object:
            return s.exec(argv=["true"])

        return asyncio.run(_timed(n, turn))


async def mcp_turns(api: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{api}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        created = await mcp.call_tool("create_session", {})
        sid = (created.structured_content or {})["id"]
        args = {"session_id": sid, "argv": ["true"]}
        times = await _timed(n, lambda: mcp.call_tool("exec", args))
        await mcp.call_tool("close_session", {"session_id": sid})
        return times


async def provider_turns(api: str, n: int) -> list[float]:
    async with AsyncClient(api, TOKEN) as sdk:
        client = SandgridSandboxClient(client=sdk)
        async with await client.create() as s:
            return await _timed(n, lambda: s.exec("true"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=100)
    n = parser.parse_args().turns
    with bench_grid(
        port=PORT, redis_url=REDIS_URL, token=TOKEN, nodes=["bi-w1", "bi-w2"], concurrency=2
    ) as grid:
        rows = {
            "REST (Client.exec)": rest_turns(grid.api_url, n),
            "MCP exec tool": asyncio.run(mcp_turns(grid.api_url, n)),
            "OpenAI Agents provider": asyncio.run(provider_turns(grid.api_url, n)),
        }
    base = statistics.median(rows["REST (Client.exec)"])
    print(f"warm turn of `true`, {n} turns each (ms)")
    print(f"{'path':<26}{'p50':>8}{'p95':>8}{'p50 / REST':>12}")
    for name, times in rows.items():
        p50 = statistics.median(times)
        print(f"{name:<26}{p50:8.1f}{pct(times, 95):8.1f}{p50 / base:12.2f}")


if __name__ == "__main__":
    main()
