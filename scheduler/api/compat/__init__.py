"""Other protocols over the same turn runner: ``mcp`` (the MCP server at ``/mcp``)
and ``agentscope`` (AgentScope Runtime's remote sandbox-manager API, with its
``agentscope_files``, ``agentscope_models`` and ``agentscope_answers``)."""

from __future__ import annotations

__all__: list[str] = []
