"""The worker's side of the in-sandbox agent: the client, its framing, the bundle.

``client`` is ``AgentClient``, the persistent request/response channel to one
sandbox's agent over the plain byte stream its runtime attached
(``worker.runtimes.base.ByteStream``); ``framing`` the bytes of that channel
(docs/agent-protocol.md); ``bundle`` builds the agent package (``worker.agent``)
into the zipapp every sandbox mounts read-only. Nothing here knows a runtime.
"""

from __future__ import annotations

from worker.agent_client.client import AgentClient, ChunkCallback

__all__ = ["AgentClient", "ChunkCallback"]
