"""The agent's side of the launcher host: start user commands without forking the agent.

``Launcher.popen`` hands the command to the launcher host (``launcherhost``),
which ``posix_spawn``s it as the user in a new session on the pipes that
``Popen`` made here: the result is a ``subprocess.Popen`` with the same pid,
pipes and session as before, so the pump, the deadline kill and cancel see no
difference, and a spawn error is the same ``OSError``. The host's children
are its own; it reports their wait statuses, which go to ``REAPER`` as if the
agent had reaped them.

The host is started between requests (``prepare``, after the reply to a
request that started a command: a Python start is ~30 ms under gVisor), never
on an exec's path. While it is not
ready, has died (the user may kill its serving thread while that thread holds
their uid), or cannot run (not root: unit tests), a spawn forks as before (``Popen(user=1000)``). A
deadline kill or a cancel stops it too, and no new one starts until a command
is started again: after a runaway command the sandbox holds only the agent and
what the user left.
If the host dies after it was given a command, the exec fails with
``sandbox_error`` rather than maybe running the command twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
from typing import Any

from .errors import AgentError
from .launcherhost import HEADER
from .limits import GID, UID
from .location import module_command
from .reaper import REAPER
from .threadcreds import supported

__all__ = [
    "LAUNCHER",
    "LAUNCH_TIMEOUT_S",
    "WARM_WAIT_S",
    "LaunchedPopen",
    "Launcher",
    "host_command",
]

WARM_WAIT_S = 5.0
"""How long a warm ping waits for the host's word (a Python start: ~30 ms under gVisor)."""

LAUNCH_TIMEOUT_S = 10.0
"""How long a spawn may take in the host before the host is killed and the exec fails."""


def host_command() -> tuple[list[str], str]:
    """The host's argv and the ``PYTHONPATH`` that finds this package (zipapp or checkout)."""
    return module_command("launcherhost", "-S", "-P")  # -P: no cwd on sys.path


class _NotLaunched(Exception):
    """The host could not take the request: nothing was started, fork instead."""


class LaunchedPopen(subprocess.Popen[bytes]):
    """``Popen`` whose child the launcher host starts (``Popen``'s own pipes, its cwd, env)."""

    def __init__(self, via: Launcher, args: list[str], **kwargs: Any) -> None:
        self._via = via
        super().__init__(args, **kwargs)

    def _execute_child(
        self,
        args: list[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: str,
        env: dict[str, str],
        startupinfo: Any,
        creationflags: Any,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *_rest: Any,
    ) -> None:
        try:
            self.pid = self._via.launch(args, env, cwd, [p2cread, c2pwrite, errwrite])
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]


class Launcher:
    """The one launcher host of this agent: started lazily, replaced when it dies."""

    def __init__(self) -> None:
        self._host: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ready = False
        self._buf = bytearray()
        self._wanted = False
        # Requests run at once: one spawn at a time on the host's socket (an RLock:
        # a failed launch stops the host from inside).
        self._lock = threading.RLock()
        self.enabled = os.geteuid() == 0 and hasattr(os, "posix_spawn") and supported()

    def pid(self) -> int | None:
        """The host's pid while there is one (root: ``user_procs`` need not read it)."""
        host = self._host
        return host.pid if host is not None else None

    def tasks(self) -> int:
        """Tasks of the host in the pids cgroup (not the user's: ``tasks_besides_agent``)."""
        host = self._host
        return 1 if host is not None and host.pid not in REAPER.status else 0

    def popen(
        self, argv: list[str], env: dict[str, str], cwd: str, *, stdin: int, stderr: int
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as the user in a new session; stdout is a pipe, ``stdin`` and
        ``stderr`` as ``Popen`` takes them."""
        kwargs: dict[str, Any] = {
            "stdin": stdin,
            "stdout": subprocess.PIPE,
            "stderr": stderr,
            "cwd": cwd,
            "env": env,
        }
        self._wanted = True
        if self.usable():
            try:
                return LaunchedPopen(self, argv, **kwargs)
            except _NotLaunched:
                pass
        return subprocess.Popen(
            argv,
            **kwargs,
            user=UID,
            group=GID,
            extra_groups=[],
            start_new_session=True,
            close_fds=True,
        )

    def usable(self, wait_s: float = 0.0) -> bool:
        """Whether the host has said it is ready (looked at without waiting, or
        waiting up to ``wait_s`` for its word)."""
        with self._lock:
            if not self.enabled or self._sock is None:
                return False
            if not self._ready and select.select([self._sock], [], [], wait_s)[0]:
                self._ready = self._read_line() == b"ready"
                if not self._ready:
                    self.stop()
            return self._ready

    def warm(self, wait_s: float = WARM_WAIT_S) -> bool:
        """Start a host before any command was started and wait until it is ready:
        the pool asks it of a sandbox it keeps (``ping`` with ``warm``), so that
        the session it is handed to finds the host ready for its first command.
        Whether it is (without root, or if it is slow, spawns fork as before)."""
        self._wanted = True
        self.prepare()
        return self.usable(wait_s)

    def prepare(self) -> None:
        """After a reply: start a host if there is none, so that the next exec need not fork.

        Only once the sandbox has started a command, or the pool wants it
        (``want``): a sandbox made for a session at once does not make its first
        exec compete with a host starting up.

        Not after a deadline kill or a cancel (``stop(quiet=True)``) until a
        command was started again: until then the sandbox holds no process but
        the agent and the user's.
        """
        if not (self.enabled and self._wanted and self._sock is None):
            return
        with REAPER.cond, self._lock:  # the order every spawn takes them (start_as_user)
            if self.enabled and self._wanted and self._sock is None:
                self._start()

    def launch(self, args: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> int:
        """The pid of ``args`` started by the host; its ``OSError`` if the spawn failed."""
        with self._lock:
            if self._sock is None:  # stopped by another request meanwhile: fork instead
                raise _NotLaunched
            return self._launch(args, env, cwd, fds)

    def _launch(self, args: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> int:
        assert self._sock is not None
        body = json.dumps({"argv": args, "env": env, "cwd": cwd}).encode()
        try:
            socket.send_fds(self._sock, [HEADER.pack(len(body))], fds)
            self._sock.sendall(body)
        except OSError:
            self.stop()
            raise _NotLaunched from None
        line = self._read_line()
        if not line:
            self.stop()
            raise AgentError("sandbox_error", "the launcher died while starting the command")
        reply = json.loads(line)
        if reply.get("quit"):  # its limits were changed: nothing started, fork instead
            self.stop()
            raise _NotLaunched
        if "errno" in reply:
            raise OSError(reply["errno"], os.strerror(reply["errno"]), args[0])
        return int(reply["pid"])

    def stop(self, quiet: bool = False) -> None:
        """Close and kill the host (its children become the agent's); the next spawn forks.

        ``quiet``: the exec was killed (deadline, cancel); no new host until a
        command is started again.
        """
        with self._lock:
            self._wanted = self._wanted and not quiet
            if self._sock is not None:
                self._sock.close()
            if self._host is not None:
                with contextlib.suppress(OSError):
                    os.kill(self._host.pid, signal.SIGKILL)
            self._host, self._sock, self._ready = None, None, False
            self._buf = bytearray()

    def _read_line(self) -> bytes:
        """One answer line from the host, or b"" when it is gone or too slow."""
        assert self._sock is not None
        self._sock.settimeout(LAUNCH_TIMEOUT_S)
        try:
            while b"\n" not in self._buf:
                chunk = self._sock.recv(4096)
                if not chunk:
                    return b""
                self._buf += chunk
        except OSError:
            return b""
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        rfd, wfd = os.pipe()
        argv, path = host_command()
        try:
            with REAPER.cond:  # held already by ``prepare``: the condition's lock is an RLock
                host = subprocess.Popen(
                    argv, stdin=theirs.fileno(), stdout=wfd, env={"PYTHONPATH": path}
                )
                REAPER.wanted.add(host.pid)
            REAPER.kick()
        except OSError:
            self.enabled = False
            ours.close()
            os.close(rfd)
            return
        finally:
            theirs.close()
            os.close(wfd)
        self._host, self._sock = host, ours
        threading.Thread(target=_forward, args=(rfd,), name="launcher-status", daemon=True).start()


def _forward(rfd: int) -> None:  # pragma: no cover - exercised through the host
    """Hand the host's child statuses to the reaper, as if the agent had reaped them."""
    with os.fdopen(rfd, "rb") as statuses:
        for line in statuses:
            pid, st = (int(x) for x in line.split())
            with REAPER.cond:
                if pid in REAPER.wanted:
                    REAPER.wanted.discard(pid)
                    REAPER.status[pid] = st
                    REAPER.cond.notify_all()


LAUNCHER = Launcher()
