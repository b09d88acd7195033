"""AgentScope 2.0's backend over a grid session, timed in AgentScope's own venv.

    <agentscope venv>/bin/python bench/_agentscope2_turns.py API TOKEN TYPE N

Run by ``bench_integrations.py`` (AgentScope 2.0 pins packages of its own, so it
lives in a venv apart, as its tests do). Times ``N`` turns of ``true`` through
``SandgridBackend.exec_shell`` and through the plain ``AsyncClient.exec`` on
the same session, in the same process, and prints both lists (ms) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _stats import timed_async

from sandgrid.client import AsyncClient
from sandgrid.integrations.agentscope import SandgridBackend


async def main(api: str, token: str, sbx_type: str, n: int) -> dict[str, list[float]]:
    async with AsyncClient(api, token) as client, client.session(type=sbx_type) as session:
        backend = SandgridBackend(client, session.id)
        plain = await timed_async(n, lambda: client.exec(session.id, argv=["true"]))
        adapter = await timed_async(n, lambda: backend.exec_shell(["true"]))
        return {"plain": plain, "adapter": adapter}


if __name__ == "__main__":
    api, token, sbx_type, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(json.dumps(asyncio.run(main(api, token, sbx_type, n))))
