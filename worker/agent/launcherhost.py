"""The launcher host: a small root process that starts the user's commands with ``posix_spawn``.

Why it exists: under gVisor a fork of the agent (a ~28 MB Python process) costs
~15-20 ms, most of a warm exec of ``true``; ``posix_spawn`` is a vfork-style
clone that copies nothing. CPython will not vfork for ``Popen(user=1000)``
because glibc's ``setuid()`` would change every thread of the agent.

How it stays the user's and root's at once: Linux (and gVisor) keep the
credentials per thread; glibc's wrappers are what make them per process. The
host's main thread stays root with nothing to do but wait. Its one serving
thread takes the sandbox user's ids with raw ``setresgid``/``setresuid``
system calls (``threadcreds.spawn_ids``: uid/gid 1000, no groups; saved uid
0), spawns, which the child
inherits from that thread, and takes root's again. Signals for the process,
``kill -9 -1`` included, are checked against the main thread's ids, so a
command that kills everything it may (a lane reset does) cannot touch the
host. Only a signal aimed at the serving thread's own id in that window can:
then the host dies, not the agent, and that exec fails with ``sandbox_error``
(``launcher.Launcher``); the next forks until a new host is ready.
``ptrace`` stays refused (the saved uid is 0; not dumpable); gVisor does let
the user ``prlimit`` the serving thread then, so a host whose limits moved
quits (``own_limits``).

Protocol (``launcher.Launcher`` is the other end): fd 0 is a Unix stream
socket. A request is an 8-byte length with the command's stdin, stdout and
stderr attached (``SCM_RIGHTS``), then that many bytes of JSON ``{"argv",
"env", "cwd"}``; the answer is one line of JSON, ``{"pid": n}`` or
``{"errno": e}``, or ``{"quit": true}`` (nothing started; it exits). The
host writes ``"ready\\n"`` once, first. Its children are its own, so it writes
each one's wait status as ``"<pid> <status>\\n"`` on fd 1 for the agent's
reaper; if the host dies, they are the agent's (PID 1) again.
Run as ``python3 -S -P -m sandgrid_agent.launcherhost`` with ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import resource
import select
import signal
import socket
import struct
import threading
from typing import Any

from .threadcreds import drop_groups, root_ids, spawn_ids

__all__ = ["HEADER", "launch", "main", "own_limits", "spawn_path"]

HEADER = struct.Struct("!Q")
"""The request's length, sent with the three descriptors."""
_PR_SET_DUMPABLE = 4
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)  # what Popen's restore_signals resets
_SKIP = (errno.ENOENT, errno.ENOTDIR)  # execvpe tries the next PATH entry on these


def spawn_path(args: list[str], env: dict[str, str], fds: list[int]) -> int:
    """``posix_spawn`` ``args`` as ``Popen`` would: PATH search, setsid, ``fds`` as 0, 1, 2.

    Every other inheritable descriptor is closed in the child (``close_fds``).
    Raises the ``OSError`` of the first candidate that existed but failed, as
    execvpe does, else ``ENOENT``.
    """
    actions: list[tuple[Any, ...]] = [
        (os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds() if fd > 2]
    name = args[0]
    paths = (
        [name] if os.path.dirname(name) else [os.path.join(d, name) for d in os.get_exec_path(env)]
    )
    first: OSError | None = None
    last = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    for path in paths:
        try:
            os.stat(path)  # a missing candidate costs a stat, not a clone
            return os.posix_spawn(
                path,
                args,
                env,
                file_actions=actions,
                setsid=True,
                setsigmask=(),
                setsigdef=_DEFAULT_SIGNALS,
            )
        except OSError as exc:
            last = exc
            if exc.errno not in _SKIP and first is None:
                first = exc
    err = (first or last).errno or errno.ENOENT
    raise OSError(err, os.strerror(err), name)


def _inheritable_fds() -> list[int]:
    """This process's open descriptors that an ``execve`` would pass on."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            if os.get_inheritable(int(name)):
                found.append(int(name))
    return found


def launch(req: dict[str, Any], fds: list[int]) -> dict[str, int]:
    """Spawn one request as the user; its answer. Exits if it cannot become root again.

    Runs on the serving thread, which holds no supplementary groups (``_serve``).
    """
    try:
        spawn_ids()
        try:
            os.chdir(req["cwd"])  # entered as the user, as a shell would
            return {"pid": spawn_path(req["argv"], req["env"], fds)}
        except OSError as exc:
            return {"errno": exc.errno or errno.EIO}
        except ValueError:  # posix_spawn's own refusal (an empty program name): not our death
            return {"errno": errno.EINVAL}
        finally:
            try:
                root_ids()
                os.chdir("/")
            except OSError:
                os._exit(1)  # never serve again as anyone but root
    finally:
        for fd in fds:
            os.close(fd)


def _recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 3)
    if not head:
        return None
    (size,) = struct.unpack("!Q", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return json.loads(body), fds


def _reap(status_fd: int) -> None:
    """Report every exited child's wait status to the agent."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        os.write(status_fd, f"{pid} {st}\n".encode())


def own_limits() -> list[Any]:
    """What a command inherits from this host besides its ids: rlimits and niceness.

    While the host holds the user's uid, gVisor lets the user ``prlimit`` and
    ``setpriority`` it; a host whose limits moved quits (the agent starts a
    fresh one) rather than hand them to the next command.
    """
    limits: list[Any] = [os.getpriority(os.PRIO_PROCESS, 0)]
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            limits.append(resource.getrlimit(getattr(resource, name)))
    return limits


def main() -> None:  # pragma: no cover - the host process itself
    """Serve spawn requests on fd 0 until the agent closes it, from a thread of its own.

    The main thread only waits: it keeps root's ids, which are the ones a signal
    for the process is checked against.
    """
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # written from whichever thread takes the signal
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.chdir("/")
    server = threading.Thread(target=_serve, args=(wake_r,), name="spawner")
    server.start()
    server.join()


def _serve(wake_r: int) -> None:  # pragma: no cover - the host process itself
    """The serving thread: no groups of its own, then one answer per request."""
    drop_groups()  # for this thread only
    sock = socket.socket(fileno=0)
    limits = own_limits()
    sock.sendall(b"ready\n")
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
            _reap(1)
        if sock.fileno() in ready:
            got = _recv_request(sock)
            if got is None:
                return
            if own_limits() != limits:  # nothing started: the agent forks instead
                sock.sendall(b'{"quit": true}\n')
                return
            sock.sendall(json.dumps(launch(*got)).encode() + b"\n")


if __name__ == "__main__":  # pragma: no cover
    main()
