"""A test double of ``SandboxFiles`` over a host directory, without a sandbox.

It runs the in-sandbox agent's own code (``worker.agent``: ``scan``,
``transfer``, ``safetar``, ``access``) on a host directory that stands for the
sandbox's ``/`` (``sbx`` is that directory's ``Path``), and turns the agent's
answers and refusals into what the worker makes of them
(``worker.agent_client.framing.error_from_reply``): tests and the benchmark run the store
end to end without containers, on the agent's real pack, unpack, scan and
ranges (docs/agent-protocol.md).

What is left here is what a host directory needs and a sandbox does not:
sandbox paths mapped below the directory (and back, in rows and errors), the
roots made when missing and refused when they are symlinks (a sandbox's roots
are its mounts), the agent's state (``SCANNED``, ``HASHES``) kept per double
rather than per process, and the worker's half of the incremental scan (the
rows kept sorted by path). The code runs as the test's user, not as the
sandbox user: it is not an isolation boundary; never point it at a directory
that untrusted code can change while it runs.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandgrid.errors import ErrorCode, SandgridError
from worker.agent import limits, safetar, transfer
from worker.agent.errors import AgentError
from worker.agent.processes import reply_of
from worker.agent.scan import Hashes, scan_diff, update
from worker.agent.scanstate import ScanRow, ScanState
from worker.agent_client.framing import error_from_reply
from worker.snapshots.sandbox import FileRange, SandboxFiles

__all__ = ["HostDirBackend"]


class _Scans:
    """The two ends of the incremental scan of one sandbox directory and its roots.

    ``agent`` and ``hashes`` are what PID 1 keeps (host paths); ``rows`` and
    ``ordered`` what the worker keeps of the replies (sandbox paths)."""

    def __init__(self, top: str, roots: tuple[str, ...]) -> None:
        self.scope = (top, roots)
        self.agent = ScanState()
        self.hashes: Hashes = {}
        self.rows: dict[str, ScanRow] = {}
        self.ordered: list[ScanRow] = []


class HostDirBackend(SandboxFiles[Path]):
    """``scan``/``pack``/``unpack``/``read_range``/``write_range`` of the agent, on
    host directories (see the module doc)."""

    def __init__(self) -> None:
        self._scans: _Scans | None = None

    def scan(self, sbx: Path, roots: list[str]) -> list[ScanRow]:
        """The agent's scan (``scan_diff``) of the roots that are directories, each
        as a delta on the last scan of the same sandbox and roots.

        As in a sandbox, a file whose (size, mtime_ns, ctime_ns, inode) did not
        change is not read again and keeps its row; only a scan that changed
        something sorts the rows again.
        """
        top = _top(sbx)
        checked = tuple(_sandbox_path(r) for r in roots)
        scans = self._scans
        if scans is None or scans.scope != (top, checked):
            scans = self._scans = _Scans(top, checked)
        host_roots = tuple(top + r for r in checked if _is_dir(top + r))
        diff = _agent(top, scan_diff, host_roots, scans.agent.rows, scans.hashes)
        update(scans.agent, host_roots, diff, delta=True, hashes=scans.hashes)
        if diff["changed"] or diff["removed"]:
            cut = len(top)
            for path in diff["removed"]:
                del scans.rows[path[cut:]]
            for row in diff["changed"]:
                scans.rows[row[0][cut:]] = (row[0][cut:], *row[1:])
            scans.ordered = sorted(scans.rows.values())
        return list(scans.ordered)

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        """The agent's ``pack_tar`` of these regular files (names without the leading ``/``)."""
        top = _top(sbx)
        files = [top + _sandbox_path(p) for p in paths]
        data: bytes = _agent(top, transfer.pack_tar, files, _below(top, limits.ROOTS), top)
        return data

    def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
        """The agent's ``safetar.extract`` into the roots (made first when missing),
        emptying them first if ``clear``; every member is checked before
        anything is written. Returns files + symlinks."""
        top = _top(sbx)
        host_roots = _below(top, [_sandbox_path(r) for r in roots])
        for root in host_roots:
            if os.path.islink(root):
                raise _refused(root[len(top) :], "a root is a symlink")
            os.makedirs(root, exist_ok=True)
        count: int = _agent(top, safetar.extract, data, top, host_roots, clear)
        return count

    def read_range(self, sbx: Path, path: str, offset: int, length: int) -> FileRange:
        """The agent's ``read_range``: up to ``length`` bytes of a regular file from
        ``offset`` (fewer at its end), with its size and mtime after the read."""
        top = _top(sbx)
        host = top + _sandbox_path(path)
        got = _agent(top, transfer.read_range, host, offset, length, _below(top, limits.ROOTS))
        return FileRange(got[0], got[1], got[2])

    def write_range(
        self,
        sbx: Path,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        *,
        mode: int,
        final: bool,
        mtime: float | None = None,
    ) -> int:
        """The agent's ``do_write_range``: a chunk of a file below ``roots``; offset 0
        creates it afresh, a later chunk must find it exactly ``offset`` bytes
        long, the final one sets its mode and mtime. Returns the file's size."""
        top = _top(sbx)
        host = top + _sandbox_path(path)
        host_roots = _below(top, [_sandbox_path(r) for r in roots])
        args = (host, offset, data, host_roots, mode, final, mtime)
        reply = _agent(top, transfer.do_write_range, *args)
        return int(reply["size"])


def _top(sbx: Path) -> str:
    """The host directory standing for ``/``, as the agent's realpath checks see it."""
    return os.path.realpath(sbx)


def _below(top: str, paths: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(top + p for p in paths)


def _is_dir(path: str) -> bool:
    """A root the scan walks: a real directory (a missing one or a symlink is skipped)."""
    return not os.path.islink(path) and os.path.isdir(path)


def _sandbox_path(path: str) -> str:
    """A sandbox path as the agent receives it: absolute and normalised, else refused."""
    if not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        raise _refused(path, "not an absolute normalised path")
    return path


def _refused(path: str, why: str) -> SandgridError:
    """What the agent answers a path it refuses, as the worker sees it (``InvalidInput``)."""
    refusal = AgentError(ErrorCode.PATH_OUTSIDE_WORKSPACE, f"{path!r} refused: {why}", path=path)
    return error_from_reply("snapshot", refusal.body())


def _agent(top: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as the worker would see its reply: the result, or the agent's
    refusal as the worker's error, its host paths named as sandbox paths."""
    reply = reply_of(fn, args)
    if reply["ok"]:
        return reply["result"]
    error = reply["error"]
    error["message"] = str(error["message"]).replace(top, "")
    for key, value in error["context"].items():
        if isinstance(value, str):
            error["context"][key] = value.replace(top, "")
    raise error_from_reply("snapshot", error)
