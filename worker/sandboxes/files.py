"""A sandbox's files as snapshots see them: ``SandboxFiles`` over the agent.

``AgentFiles`` is the production implementation of
``worker.snapshots.sandbox.SandboxFiles`` (scan, pack, unpack, read_range,
write_range), composed into every ``SandboxManager`` as its ``files``. Each
method validates its input, makes one agent request through the manager's
``call`` (its state checks, a lost sandbox marked lost; docs/agent-protocol.md)
and checks the reply; ``worker.snapshots.sync`` drives them.
A file too large for one frame travels in chunks of ``read_range`` and
``write_range``; everything else in ``pack`` and ``unpack`` tars.
``read_direct`` reads changed files from the host instead, where the runtime
lets the host see them (runc). ``scan_then`` and ``keep_scan`` fold the scan
into the exec before it; they act on the handle's scan state alone.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sandgrid.errors import InvalidInput, SandboxError
from worker.agent.limits import ROOTS
from worker.agent.scanstate import ScanRow, ScanState
from worker.runtimes.hostfiles import read_beneath
from worker.sandboxes.handle import Sandbox
from worker.sandboxes.scan import apply_reply, inline_of
from worker.snapshots.sandbox import FileRange, SandboxFiles

__all__ = [
    "SCAN_INLINE_BYTES",
    "SNAPSHOT_ROOTS",
    "AgentCaller",
    "AgentFiles",
    "ScanThen",
    "check_roots",
    "file_range",
    "keep_scan",
    "raw_data",
    "scan_then",
]


SNAPSHOT_ROOTS = ROOTS
"""What a snapshot holds: the agent's own roots (``worker.agent.limits.ROOTS``)."""

SCAN_INLINE_BYTES = 64 << 10
"""A scan carries the changed files it read, up to this many bytes in all, so that the
snapshot of a small change asks no ``pack`` (issue 22.2; a pointer carries as much)."""


def check_roots(roots: list[str], operation: str) -> list[str]:
    """Snapshot roots must be a non-empty subset of ``SNAPSHOT_ROOTS``."""
    if not roots or any(r not in SNAPSHOT_ROOTS for r in roots):
        raise InvalidInput(
            f"roots must be a non-empty subset of {list(SNAPSHOT_ROOTS)}, got {roots!r}",
            operation=operation,
            context={"field": "roots", "value": list(roots)},
        )
    return list(roots)


def raw_data(reply: dict[str, Any], operation: str) -> bytes:
    """The bytes of a ``pack`` or ``read_range`` reply: its binary frame's payload
    (``worker.agent_client.framing.decode_binary``), never base64.

    Raises:
        SandboxError: the reply carries none.
    """
    data = reply.get("data")
    if not isinstance(data, bytes):
        raise SandboxError("the agent's reply carries no bytes", operation=operation)
    return data


def file_range(reply: dict[str, Any]) -> FileRange:
    """The ``FileRange`` of a ``read_range`` reply.

    Raises:
        SandboxError: the reply is malformed.
    """
    try:
        size, mtime_ns = reply["size"], reply["mtime_ns"]
        if type(size) is not int or type(mtime_ns) is not int:
            raise TypeError("size and mtime_ns must be integers")
        return FileRange(raw_data(reply, "snapshot.read"), size, mtime_ns)
    except (KeyError, TypeError) as exc:
        raise SandboxError(
            f"malformed read_range reply from the agent: {exc}", operation="snapshot.read"
        ) from None


class AgentCaller(Protocol):
    """What makes one agent request on a usable sandbox: ``SandboxManager``."""

    def call(self, sbx: Sandbox, op: str, fields: dict[str, Any]) -> dict[str, Any]: ...

    def host_pid(self, sbx: Sandbox) -> int: ...


@dataclass(frozen=True)
class ScanThen:
    """A scan request, with the rows its delta applies to (None: a full scan)."""

    fields: dict[str, Any]
    roots: tuple[str, ...]
    prior: ScanState | None


def _scan_request(sbx: Sandbox, checked: list[str]) -> ScanThen:
    """The request of the next scan of ``checked``: a delta on the rows kept on the
    sandbox when they are of the same roots. It takes them: a scan that fails in
    any way leaves none, so the next one is full."""
    fields: dict[str, Any] = {"roots": checked, "inline": SCAN_INLINE_BYTES}
    prior, sbx.scan_state = sbx.scan_state, None
    if prior is not None and prior.roots == tuple(checked):
        fields["since"] = prior.token
    else:
        prior = None
    return ScanThen(fields, tuple(checked), prior)


def scan_then(sbx: Sandbox) -> ScanThen | None:
    """The scan the next exec makes after its command (``Sandbox.scan_after_exec``),
    as the ``then`` of its request; None when none was asked for."""
    roots, sbx.scan_after_exec = sbx.scan_after_exec, None
    if not roots:
        return None
    return _scan_request(sbx, check_roots(list(roots), "snapshot.scan"))


def keep_scan(sbx: Sandbox, then: ScanThen, reply: Any) -> None:
    """Keep the exec's scan for the snapshot after it (``scan`` answers with it).

    A missing, failed or malformed one is dropped: the snapshot then scans in
    full, as after any failed scan."""
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        return
    result = reply.get("result") or {}
    try:
        sbx.scan_ready = apply_reply(result, then.roots, then.prior)
        sbx.scan_inline = inline_of(result)
    except SandboxError:
        sbx.scan_ready, sbx.scan_inline = None, {}


class AgentFiles(SandboxFiles[Sandbox]):
    """``scan``, ``pack``, ``unpack``, ``read_range``, ``write_range`` over ``call``.

    Args:
        sandboxes: makes each request (``SandboxManager.call``: its state
            checks, a broken channel marking the sandbox lost).
    """

    def __init__(self, sandboxes: AgentCaller) -> None:
        self.sandboxes = sandboxes

    def scan(self, sbx: Sandbox, roots: list[str]) -> list[ScanRow]:
        """``SandboxFiles.scan``, incremental: after the first scan of a sandbox,
        the agent is asked only for what changed since its last reply
        (``since``), which this handle applies to the rows it kept. A scan that
        fails in any way drops them, so the next one is full."""
        checked = check_roots(roots, "snapshot.scan")
        ready, sbx.scan_ready = sbx.scan_ready, None
        if ready is not None and ready.roots == tuple(checked):  # taken with the exec
            sbx.scan_state = ready
            return list(ready.ordered)
        then = _scan_request(sbx, checked)
        sbx.scan_inline = {}
        reply = self.sandboxes.call(sbx, "scan", then.fields)
        state = apply_reply(reply, then.roots, then.prior)
        sbx.scan_inline = inline_of(reply)
        sbx.scan_state = state
        return list(state.ordered)

    def inlined(self, sbx: Sandbox) -> dict[str, bytes]:
        """``SandboxFiles.inlined``: what the last scan carried, handed over once."""
        inline, sbx.scan_inline = sbx.scan_inline, {}
        return inline

    def read_direct(self, sbx: Sandbox, files: Sequence[tuple[str, int]]) -> dict[str, bytes]:
        """``SandboxFiles.read_direct``: from the host through the sandbox's top process
        (``worker.runtimes.hostfiles``) when its runtime allows it (runc), else none."""
        pid = self.sandboxes.host_pid(sbx)
        if not pid or not files:
            return {}
        return read_beneath(pid, sbx.id, files, SNAPSHOT_ROOTS)

    def pack(self, sbx: Sandbox, paths: list[str]) -> bytes:
        """``SandboxFiles.pack``: the agent's tar, not compressed (it crosses the channel only)."""
        return raw_data(self.sandboxes.call(sbx, "pack", {"files": list(paths)}), "snapshot.pack")

    def unpack(self, sbx: Sandbox, data: bytes, roots: list[str], clear: bool) -> int:
        """``SandboxFiles.unpack``, one agent request per tar."""
        fields = {
            "data_b64": base64.b64encode(data).decode(),
            "roots": check_roots(roots, "snapshot.unpack"),
            "clear": clear,
        }
        return int(self.sandboxes.call(sbx, "unpack", fields)["files"])

    def read_range(self, sbx: Sandbox, path: str, offset: int, length: int) -> FileRange:
        """``SandboxFiles.read_range``; ``length`` is at most what one frame carries."""
        fields = {"path": path, "offset": offset, "length": length}
        return file_range(self.sandboxes.call(sbx, "read_range", fields))

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
        size = self.sandboxes.call(sbx, "write_range", fields).get("size")
        if type(size) is not int:
            raise SandboxError("malformed write_range reply from the agent", operation="snapshot")
        return size
