"""The snapshot half of a sandbox backend: ``SandboxFiles`` over the agent channel.

The production implementation of ``worker.snapshots.sandbox.SandboxFiles``
(scan, pack, unpack, read_range, write_range); ``SandboxBackend`` inherits it,
kept apart to keep ``base`` readable. Each method validates its input, makes
one agent request over the backend's ``call`` (docs/agent-protocol.md) and
checks the reply; ``worker.snapshots.workspace`` drives them. A file too
large for one frame travels in chunks of ``read_range`` and ``write_range``;
everything else in ``pack`` and ``unpack`` tars.
"""

from __future__ import annotations

import base64
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from sandgrid.errors import SandboxError
from worker.agent.scanstate import ScanRow
from worker.agent_api import FileRange, check_roots, file_range
from worker.backends.scan import apply_reply
from worker.snapshots.sandbox import SandboxFiles

if TYPE_CHECKING:
    from worker.backends.base import Sandbox

__all__ = ["SnapshotOps"]


class SnapshotOps(SandboxFiles["Sandbox"]):
    """``scan``, ``pack``, ``unpack``, ``read_range``, ``write_range`` over ``call``."""

    @abstractmethod
    def call(self, sbx: Sandbox, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        """One agent request (``SandboxBackend.call``)."""

    def scan(self, sbx: Sandbox, roots: list[str]) -> list[ScanRow]:
        """``SandboxFiles.scan``, incremental: after the first scan of a sandbox,
        the agent is asked only for what changed since its last reply
        (``since``), which this handle applies to the rows it kept. A scan that
        fails in any way drops them, so the next one is full."""
        checked = check_roots(roots, "snapshot.scan")
        fields: dict[str, Any] = {"roots": checked}
        prior, sbx.scan_state = sbx.scan_state, None
        if prior is not None and prior.roots == tuple(checked):
            fields["since"] = prior.token
        else:
            prior = None
        state = apply_reply(self.call(sbx, "scan", fields), tuple(checked), prior)
        sbx.scan_state = state
        return list(state.ordered)

    def pack(self, sbx: Sandbox, paths: list[str]) -> bytes:
        """``SandboxFiles.pack``: the agent's tar.gz is level 1."""
        return base64.b64decode(self.call(sbx, "pack", {"files": list(paths)})["data_b64"])

    def unpack(self, sbx: Sandbox, data: bytes, roots: list[str], clear: bool) -> int:
        """``SandboxFiles.unpack``, one agent request per tar."""
        fields = {
            "data_b64": base64.b64encode(data).decode(),
            "roots": check_roots(roots, "snapshot.unpack"),
            "clear": clear,
        }
        return int(self.call(sbx, "unpack", fields)["files"])

    def read_range(self, sbx: Sandbox, path: str, offset: int, length: int) -> FileRange:
        """``SandboxFiles.read_range``; ``length`` is at most what one frame carries."""
        fields = {"path": path, "offset": offset, "length": length}
        return file_range(self.call(sbx, "read_range", fields))

    def write_range(
        self,
        sbx: Sandbox,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        *,
        mode: int,
        final: bool,
        mtime: float | None = None,
    ) -> int:
        """``SandboxFiles.write_range``; until the ``final`` chunk the file is
        private to the sandbox user."""
        fields = {
            "path": path,
            "offset": offset,
            "data_b64": base64.b64encode(data).decode(),
            "roots": check_roots(roots, "snapshot.write"),
            "mode": mode,
            "final": final,
            "mtime": mtime,
        }
        size = self.call(sbx, "write_range", fields).get("size")
        if type(size) is not int:
            raise SandboxError("malformed write_range reply from the agent", operation="snapshot")
        return size
