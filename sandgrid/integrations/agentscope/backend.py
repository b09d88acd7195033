"""``SandgridBackend``: AgentScope 2.0's ``BackendBase`` over one grid session.

AgentScope's builtin tools (Bash, Read, Write, Edit, Grep, Glob) do all their
I/O through a workspace's backend; this one sends each call to the grid: the
three primitives are ``GridCalls`` (one exec or one file op each, mapped onto
what AgentScope's own backends answer: see ``calls``), and the derived helpers
(``file_exists``, ``is_dir``, ``list_dir``, ``scandir``, ``stat``,
``stat_mtime``, ``delete_path``) are AgentScope's own, over ``exec_shell``.
``getcwd`` answers ``workdir`` without a round trip, as the Docker and E2B
backends do.

Construction is one line and cheap (no I/O), so a backend can be made per
request, or timed against the plain SDK::

    backend = SandgridBackend(client, session_id)
    result = await backend.exec_shell(["echo", "hi"])
"""

from __future__ import annotations

from agentscope.tool import BackendBase, ExecResult

from sandgrid.client import AsyncClient
from sandgrid.integrations.agentscope.calls import DEFAULT_MAX_TIMEOUT_S, GridCalls
from sandgrid.models import WORKSPACE

__all__ = ["SandgridBackend"]


class SandgridBackend(BackendBase):  # type: ignore[misc]  # agentscope is untyped here
    """AgentScope's backend interface, each call a grid call on ``session_id``.

    Args:
        client: the SDK's ``AsyncClient`` (its owner closes it).
        session_id: the open grid session the calls run in.
        workdir: where commands run by default; ``/workspace``.
        max_timeout_s: the deadline of ``timeout=None`` (the tenant's ceiling).
    """

    def __init__(
        self,
        client: AsyncClient,
        session_id: str,
        *,
        workdir: str = WORKSPACE,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
    ) -> None:
        self.calls = GridCalls(client, session_id, workdir, max_timeout_s)

    @property
    def session_id(self) -> str:
        """The grid session this backend runs in."""
        return self.calls.session_id

    async def getcwd(self) -> str:
        """``workdir``: where a command with no ``cwd`` runs (no round trip)."""
        return self.calls.workdir

    async def exec_shell(
        self, command: list[str], *, cwd: str | None = None, timeout: float | None = None
    ) -> ExecResult:
        """Run ``command`` (an argv, no shell) in the sandbox; see ``GridCalls.run``."""
        code, out, err = await self.calls.run(list(command), cwd, timeout)
        return ExecResult(exit_code=code, stdout=out, stderr=err)

    async def read_file(self, path: str) -> bytes:
        """The file's bytes; ``FileNotFoundError`` when it is missing (``GridCalls.read``)."""
        return await self.calls.read(path)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``, making its parents (``GridCalls.write``)."""
        await self.calls.write(path, bytes(data))
