"""A ``SandboxAgent`` of the OpenAI Agents SDK whose sandbox is a sandgrid session.

Needs a running grid (``SANDGRID_API_URL``, ``SANDGRID_TOKEN``), the extra
(``pip install 'sandgrid[openai-agents]'``) and a model key (``OPENAI_API_KEY``):

    python examples/openai_agents.py "Write fizzbuzz.py, run it for 1..15, show the output"

The agent's shell and file tools run in the grid: every command is a turn on a
worker, and the workspace is saved after each turn that changed it.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig

from sandgrid.integrations.openai_agents import SandgridSandboxClient, SandgridSandboxClientOptions


async def main(task: str) -> None:
    agent = SandboxAgent(
        name="coder",
        instructions="You work in /workspace. Run what you write before you answer.",
        default_manifest=Manifest(),
    )
    sandbox = SandboxRunConfig(
        client=SandgridSandboxClient(),  # SANDGRID_API_URL and SANDGRID_TOKEN
        options=SandgridSandboxClientOptions(
            sandbox_type="python",
            quotas={"memory_mb": 512, "timeout_s": 60},
            labels={"example": "openai-agents"},
        ),
    )
    result = await Runner.run(agent, task, run_config=RunConfig(sandbox=sandbox))
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Print the Python version of the sandbox."))
