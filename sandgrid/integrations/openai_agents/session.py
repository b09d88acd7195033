"""A sandgrid session as an OpenAI Agents SDK sandbox session.

Every primitive is one call of sandgrid's own ``AsyncClient``: ``exec`` is a
turn (the grid's deadline, output caps and snapshot-after-turn hold), file reads
and writes are the file operations, and the workspace tar is the grid's tar
download and upload, with member paths relative to ``/workspace``. Paths are
checked twice: lexically by the SDK's policy, then by the in-sandbox agent,
which resolves symlinks and refuses any path that leaves ``/workspace``.

The PTY methods run on the grid's background processes (``pty.BackgroundPty``).
What is not served: running as another user (the sandbox has one), and exposed
ports (a sandbox has no network device).
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path, PurePosixPath
from typing import Literal

from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    InvalidManifestPathError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.types import ExecResult, User
from pydantic import Field

from sandgrid.client import AsyncClient
from sandgrid.errors import ErrorCode, NotFound, SandgridError
from sandgrid.integrations.openai_agents.pty import BackgroundPty
from sandgrid.models import WORKSPACE

__all__ = [
    "SandgridSandboxSession",
    "SandgridSandboxSessionState",
]

#: Exit code reported for a command killed by a signal with no code of its own.
_KILLED_EXIT = -1


class SandgridSandboxSessionState(SandboxSessionState):
    """The SDK's session state plus what re-attaches to the grid.

    ``sandgrid_session_id`` is the grid's id (``s-...``); the SDK's own
    ``session_id`` stays a UUID.
    """

    type: Literal["sandgrid"] = "sandgrid"
    sandgrid_session_id: str
    sandbox_type: str = "python"
    quotas: dict[str, object] = Field(default_factory=dict)
    network: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    close_on_shutdown: bool = True


class SandgridSandboxSession(BackgroundPty, BaseSandboxSession):
    """One sandgrid session, driven through ``AsyncClient``.

    Args:
        state: the serialisable state (it names the grid session).
        client: the SDK client that reaches the grid.
    """

    state: SandgridSandboxSessionState

    def __init__(self, *, state: SandgridSandboxSessionState, client: AsyncClient) -> None:
        self.state = state
        self._client = client

    @property
    def sandgrid_session_id(self) -> str:
        return self.state.sandgrid_session_id

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        argv = [str(c) for c in command]
        try:
            result = await self._client.exec(self.sandgrid_session_id, argv, timeout_s=timeout)
        except SandgridError as exc:
            raise ExecTransportError(
                command=argv,
                context={"code": str(exc.code), "message": exc.message},
                cause=exc,
                retryable=exc.retryable,
            ) from exc
        if result.timed_out:
            raise ExecTimeoutError(command=argv, timeout_s=timeout)
        code = result.exit_code
        if code is None:
            code = 128 + result.signal if result.signal else _KILLED_EXIT
        return ExecResult(
            stdout=result.stdout.encode(), stderr=result.stderr.encode(), exit_code=code
        )

    def _relative(self, path: Path | str, *, for_write: bool = False) -> str:
        """The workspace-relative path the grid expects, after the SDK's lexical check."""
        full = PurePosixPath(self.normalize_path(path, for_write=for_write).as_posix())
        return full.relative_to(WORKSPACE).as_posix() or "."

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        rel = self._relative(path)
        try:
            data = await self._client.read_file(self.sandgrid_session_id, rel, binary=True)
        except SandgridError as exc:
            raise _read_error(path, rel, exc) from exc
        assert isinstance(data, bytes)
        return io.BytesIO(data)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = data.read()
        if isinstance(payload, str):
            payload = payload.encode()
        if not isinstance(payload, bytes | bytearray):
            raise WorkspaceWriteTypeError(path=path, actual_type=type(payload).__name__)
        rel = self._relative(path, for_write=True)
        try:
            await self._client.write_files(self.sandgrid_session_id, {rel: bytes(payload)})
        except SandgridError as exc:
            if exc.code == ErrorCode.PATH_OUTSIDE_WORKSPACE:
                raise InvalidManifestPathError(rel=rel, reason="escape_root", cause=exc) from exc
            raise WorkspaceArchiveWriteError(path=path, cause=exc) from exc

    async def running(self) -> bool:
        try:
            info = await self._client.get_session(self.sandgrid_session_id)
        except SandgridError:
            return False
        return info.state != "closed"

    async def persist_workspace(self) -> io.IOBase:
        root = Path(WORKSPACE)
        try:
            data = await self._client.download_tar(self.sandgrid_session_id, ".")
        except SandgridError as exc:
            raise WorkspaceArchiveReadError(path=root, cause=exc) from exc
        skip = {p.as_posix() for p in self._persist_workspace_skip_relpaths()}
        return io.BytesIO(_without(data, skip) if skip else data)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        payload = data.read()
        if isinstance(payload, str):
            payload = payload.encode()
        try:
            await self._client.upload_tar(self.sandgrid_session_id, bytes(payload), ".")
        except SandgridError as exc:
            raise WorkspaceArchiveWriteError(path=Path(WORKSPACE), cause=exc) from exc

    async def _shutdown_backend(self) -> None:
        """Close the grid session (its sandbox and snapshots go), unless told to keep it."""
        if self.state.close_on_shutdown:
            await self.close_grid_session()

    async def close_grid_session(self) -> None:
        """Close the grid session; a closed or unknown one is fine (idempotent)."""
        with contextlib.suppress(NotFound):
            await self._client.close_session(self.sandgrid_session_id)


def _read_error(path: Path, rel: str, exc: SandgridError) -> Exception:
    if exc.code == ErrorCode.PATH_OUTSIDE_WORKSPACE:
        return InvalidManifestPathError(rel=rel, reason="escape_root", cause=exc)
    missing = isinstance(exc, NotFound) or "No such file" in exc.message
    if missing:
        return WorkspaceReadNotFoundError(path=path, cause=exc)
    return WorkspaceArchiveReadError(path=path, cause=exc, retryable=exc.retryable)


def _without(data: bytes, skip: set[str]) -> bytes:
    """The tar ``data`` without the members at or under the ``skip`` paths."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            name = member.name.removeprefix("./")
            if any(name == s or name.startswith(s + "/") for s in skip):
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()
