"""Read a runc sandbox's files from the host, without its agent (issue 22.2).

A runc sandbox's ``/workspace`` and ``/home/sandbox`` are tmpfs mounts of its
own mount namespace, which the host reaches through ``/proc/<pid>/root`` of
the container's top process. A snapshot that needs the bytes of a changed
file can read them there instead of asking the agent for a ``pack`` (a copy
through the sandbox, its attached stdio and Docker's attach stream: ~9 ms for
1 MB on this machine, against well under 1 ms here).

What keeps the read safe (docs/decisions.md, "A runc snapshot reads its files
from the host"):

- the PID is pinned by a pidfd whose cgroup names the container
  (``hostkill.container_pidfd``), and found alive *after* the roots are
  opened, so a recycled PID is never read through;
- each file is opened with ``openat2`` beneath its root's directory, with no
  symlink of any kind followed and no mount crossed
  (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
  RESOLVE_NO_XDEV``), non-blocking (a FIFO never waits), and kept only when it
  is a regular file of the size the scan gave;
- the caller keeps bytes only when they hash to the sha256 the sandbox's own
  scan gave, so nothing read here can put another file's bytes in a snapshot.

Anything else (gVisor, whose files live in its sentry; a worker in another PID
namespace; a file that is not there as scanned) answers "not read", and the
snapshot asks the agent as before.
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from worker.runtimes.hostkill import container_pidfd

__all__ = ["read_beneath"]

_SYS_OPENAT2 = 437  # the same number on every architecture (the generic syscall table)
_RESOLVE = 0x01 | 0x02 | 0x04 | 0x08  # NO_XDEV | NO_MAGICLINKS | NO_SYMLINKS | BENEATH
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def _openat2(dirfd: int, rel: str) -> int:
    """``openat2(dirfd, rel)`` with the module's flags, or -1 with ``errno``."""
    how = _OpenHow(_FLAGS, 0, _RESOLVE)
    fd: int = _libc.syscall(
        _SYS_OPENAT2,
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    return fd


def read_beneath(
    pid: int,
    container_id: str,
    files: Sequence[tuple[str, int]],
    roots: Sequence[str],
    proc: Path = Path("/proc"),
) -> dict[str, bytes]:
    """The bytes of the regular files ``(path, size)`` that could be read from the
    host: each under one of ``roots`` (absolute, as the sandbox sees them) and
    exactly ``size`` bytes long. Files that could not be read are left out;
    nothing raises.

    Args:
        pid: the container's top process as the engine reports it (``State.Pid``).
        container_id: the full container id, which its cgroup path carries.
        proc: the host's procfs.
    """
    if pid <= 0 or not container_id:
        return {}
    wanted: dict[str, list[tuple[str, str, int]]] = {}
    for path, size in files:
        root = next((r for r in roots if path.startswith(r.rstrip("/") + "/")), None)
        if root is not None and size >= 0:
            wanted.setdefault(root, []).append((path, path[len(root.rstrip("/")) + 1 :], size))
    out: dict[str, bytes] = {}
    dirs = _open_roots(pid, container_id, proc, list(wanted))
    try:
        for root, dirfd in dirs.items():
            for path, rel, size in wanted[root]:
                data = _read_one(dirfd, rel, size)
                if data is not None:
                    out[path] = data
    finally:
        for fd in dirs.values():
            os.close(fd)
    return out


def _open_roots(pid: int, container_id: str, proc: Path, roots: list[str]) -> dict[str, int]:
    """Directory fds of ``roots`` inside the container whose top process is
    ``pid``; none when the PID is not (or is no longer) that container's."""
    pidfd = container_pidfd(pid, container_id, proc)
    if pidfd is None:
        return {}
    dirs: dict[str, int] = {}
    try:
        for root in roots:
            with suppress(OSError):
                dirs[root] = os.open(
                    f"{proc}/{pid}/root{root}",
                    os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                )
        signal.pidfd_send_signal(pidfd, 0)  # alive: the roots were opened in its namespace
    except OSError:
        for fd in dirs.values():
            os.close(fd)
        return {}
    finally:
        os.close(pidfd)
    return dirs


def _read_one(dirfd: int, rel: str, size: int) -> bytes | None:
    """The file's bytes when it is a regular file of ``size`` bytes, else None."""
    fd = _openat2(dirfd, rel)
    if fd < 0:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return None
        parts: list[bytes] = []
        got = 0
        while got <= size:
            part = os.read(fd, size + 1 - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        if got != size:
            return None
        return b"".join(parts) if len(parts) != 1 else parts[0]
    except OSError:
        return None
    finally:
        os.close(fd)
