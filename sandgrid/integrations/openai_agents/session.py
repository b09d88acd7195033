"""A sandgrid session as an OpenAI Agents SDK sandbox session.

Every primitive is one call of sandgrid's own ``AsyncClient``: ``exec`` is a
turn (the grid's deadline, output caps and snapshot-after-turn hold), file reads
and writes are the file operations, and the workspace tar is the grid's tar
download and upload, with member paths relative to ``/workspace``. Paths are
checked twice: lexically by the SDK's policy, then by the in-sandbox agent,
which resolves symlinks and refuses any path that leaves ``/workspace``.

``exec`` output is bytes-exact (``exec_output``: the command runs under a
``base64`` wrapper unless ``exact_output`` is off), a cut output says so, and
``timeout=None`` is the tenant's longest deadline, not the session's default. A
file over the JSON read limit (16 MiB) is read through the tar download. The
PTY methods run on the grid's background processes, or with ``tty=True`` on
the grid's terminal (``pty.BackgroundPty``). An exposed port (``exposed_ports``)
resolves to a signed preview URL of the grid's port route (docs/ports.md): the
endpoint's host and port are the API's and its query carries the token
(``?sg_preview=...``), so ``url_for("http")`` and ``url_for("ws")`` reach the
port's root with no tenant token. What is not served: running as another user
(the sandbox has one), and the manifest's ``extra_path_grants`` (the grid's
file operations reach ``/workspace`` only: a clear ``WorkspaceIOError`` says so).
"""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import urlsplit

from agents.sandbox.errors import ErrorCode as SdkErrorCode
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExposedPortUnavailableError,
    InvalidManifestPathError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
from pydantic import Field

from sandgrid.client import AsyncClient
from sandgrid.errors import Conflict, ErrorCode, InvalidInput, NotFound, SandgridError
from sandgrid.integrations.openai_agents.exec_output import (
    SandgridExecResult,
    decode_exact,
    transport_error,
    wrap_exact,
)
from sandgrid.integrations.openai_agents.pty import BackgroundPty
from sandgrid.integrations.openai_agents.tars import member_bytes, workspace_tar
from sandgrid.models import WORKSPACE
from sandgrid.models import ExecResult as GridExecResult

__all__ = [
    "MAX_DEADLINE_S",
    "OutsideWorkspaceError",
    "SandgridSandboxSession",
    "SandgridSandboxSessionState",
]

#: Exit code reported for a command killed by a signal with no code of its own.
_KILLED_EXIT = -1

_CLOSE_WAIT_S = 30.0
MAX_DEADLINE_S = 3600.0
"""The longest exec deadline the wire takes (``ExecRequest.timeout_s``); a tenant's
ceiling may be lower, and is learnt from the grid's refusal (its ``ceiling``)."""


class OutsideWorkspaceError(WorkspaceIOError):
    """A path the SDK's policy allows (an ``extra_path_grants`` entry) but the grid cannot reach."""

    def __init__(self, *, path: Path, op: Literal["read", "write"]) -> None:
        super().__init__(
            message=(
                f"{path} is outside /workspace: the sandgrid provider reads and writes files "
                "under /workspace only (extra_path_grants are not served); use exec to reach it"
            ),
            error_code=(
                SdkErrorCode.WORKSPACE_ARCHIVE_READ_ERROR
                if op == "read"
                else SdkErrorCode.WORKSPACE_ARCHIVE_WRITE_ERROR
            ),
            op=op,
            context={"path": str(path), "reason": "outside_workspace"},
            retryable=False,
        )


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
    exact_output: bool = True
    deadline_ceiling_s: float | None = None
    preview_ttl_s: int = 3600


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

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """A signed preview URL of ``port`` as the SDK's endpoint (host, port, query)."""
        try:
            made = await self._client.port_url(
                self.sandgrid_session_id, port, expires_in=self.state.preview_ttl_s
            )
        except SandgridError as exc:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={"backend": "sandgrid", "code": str(exc.code)},
                cause=exc,
                retryable=exc.retryable,
            ) from exc
        split = urlsplit(made.url)
        tls = split.scheme == "https"
        return ExposedPortEndpoint(
            host=split.hostname or "127.0.0.1",
            port=split.port or (443 if tls else 80),
            tls=tls,
            query=f"sg_preview={made.token}",
        )

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        argv = [str(c) for c in command]
        sent = wrap_exact(argv) if self.state.exact_output else argv
        try:
            result, deadline = await self._exec_within_deadline(sent, timeout)
        except SandgridError as exc:
            raise transport_error(argv, exc) from exc
        if result.timed_out:
            raise ExecTimeoutError(command=argv, timeout_s=deadline)
        code = result.exit_code
        if code is None:
            code = 128 + result.signal if result.signal else _KILLED_EXIT
        if self.state.exact_output:
            out, err, out_cut, err_cut = decode_exact(result)
        else:
            out, err = result.stdout.encode(), result.stderr.encode()
            out_cut, err_cut = result.stdout_truncated, result.stderr_truncated
        return SandgridExecResult.of(out, err, code, (out_cut, err_cut))

    async def _exec_within_deadline(
        self, argv: list[str], timeout: float | None
    ) -> tuple[GridExecResult, float]:
        """Run ``argv``; ``timeout=None`` is the tenant's longest deadline (SDK: no limit)."""
        if timeout is not None:
            done = await self._grid(
                lambda: self._client.exec(self.sandgrid_session_id, argv, timeout_s=timeout)
            )
            return done, timeout
        deadline = self.state.deadline_ceiling_s or MAX_DEADLINE_S
        try:
            done = await self._grid(
                lambda: self._client.exec(self.sandgrid_session_id, argv, timeout_s=deadline)
            )
            return done, deadline
        except InvalidInput as exc:
            ceiling = exc.context.get("ceiling")
            if exc.context.get("field") != "timeout_s" or not isinstance(ceiling, int | float):
                raise
        self.state.deadline_ceiling_s = float(ceiling)
        limit = float(ceiling)
        result = await self._grid(
            lambda: self._client.exec(self.sandgrid_session_id, argv, timeout_s=limit)
        )
        return result, limit

    def _relative(self, path: Path | str, *, for_write: bool = False) -> str:
        """The workspace-relative path the grid expects, after the SDK's lexical check.

        Raises:
            OutsideWorkspaceError: the SDK allows the path (an extra path grant), the grid
                does not reach it.
        """
        full = PurePosixPath(self.normalize_path(path, for_write=for_write).as_posix())
        if full != PurePosixPath(WORKSPACE) and PurePosixPath(WORKSPACE) not in full.parents:
            raise OutsideWorkspaceError(path=Path(full), op="write" if for_write else "read")
        return full.relative_to(WORKSPACE).as_posix() or "."

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        rel = self._relative(path)
        try:
            data = await self._grid(
                lambda: self._client.read_file(self.sandgrid_session_id, rel, binary=True)
            )
        except SandgridError as exc:
            if exc.code != ErrorCode.PAYLOAD_TOO_LARGE:
                raise _read_error(path, rel, exc) from exc
            data = await self._read_through_tar(path, rel)
        assert isinstance(data, bytes)
        return io.BytesIO(data)

    async def _read_through_tar(self, path: Path, rel: str) -> bytes:
        """A file over the JSON read limit, through the tar download (its own, larger cap)."""
        try:
            tar = await self._grid(lambda: self._client.download_tar(self.sandgrid_session_id, rel))
        except SandgridError as exc:
            raise _read_error(path, rel, exc) from exc
        data = member_bytes(tar)
        if data is None:
            raise WorkspaceArchiveReadError(path=path, context={"reason": "not a regular file"})
        return data

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = data.read()
        if isinstance(payload, str):
            payload = payload.encode()
        if not isinstance(payload, bytes | bytearray):
            raise WorkspaceWriteTypeError(path=path, actual_type=type(payload).__name__)
        rel = self._relative(path, for_write=True)
        try:
            files = {rel: bytes(payload)}
            await self._grid(lambda: self._client.write_files(self.sandgrid_session_id, files))
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
            data = await self._grid(
                lambda: self._client.download_tar(self.sandgrid_session_id, ".")
            )
        except SandgridError as exc:
            raise WorkspaceArchiveReadError(path=root, cause=exc) from exc
        skip = {p.as_posix() for p in self._persist_workspace_skip_relpaths()}
        return io.BytesIO(workspace_tar(data, skip))

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        payload = data.read()
        if isinstance(payload, str):
            payload = payload.encode()
        try:
            tar = bytes(payload)
            await self._grid(lambda: self._client.upload_tar(self.sandgrid_session_id, tar, "."))
        except SandgridError as exc:
            raise WorkspaceArchiveWriteError(path=Path(WORKSPACE), cause=exc) from exc

    async def _shutdown_backend(self) -> None:
        """Close the grid session (its sandbox and snapshots go), unless told to keep it."""
        if self.state.close_on_shutdown:
            await self.close_grid_session()

    async def close_grid_session(self) -> None:
        """Close the grid session; a closed or unknown one is fine (idempotent)."""
        end = time.monotonic() + _CLOSE_WAIT_S
        while True:
            try:
                await self._client.close_session(self.sandgrid_session_id)
                return
            except NotFound:
                return
            except Conflict:  # a turn (a terminal ending) still holds it: bounded wait
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.2)


def _read_error(path: Path, rel: str, exc: SandgridError) -> Exception:
    if exc.code == ErrorCode.PATH_OUTSIDE_WORKSPACE:
        return InvalidManifestPathError(rel=rel, reason="escape_root", cause=exc)
    missing = isinstance(exc, NotFound) or "No such file" in exc.message
    if missing:
        return WorkspaceReadNotFoundError(path=path, cause=exc)
    return WorkspaceArchiveReadError(path=path, cause=exc, retryable=exc.retryable)
