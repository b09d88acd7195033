"""The launcher: one agent thread that starts the user's commands without forking the agent.

Why: under gVisor, ``subprocess.Popen(..., user=1000)`` forks the whole agent (a
~28 MB Python process), and gVisor's fork copies its address space: ~15-20 ms of
a ~22 ms warm exec of ``true`` (docs/performance.md has the breakdown). CPython
uses ``vfork`` only when no ``user=``/``group=`` is asked for, because glibc's
``setuid()`` changes every thread of the process.

How: Linux keeps credentials per thread; only glibc makes them process-wide. This
thread switches itself, with raw syscalls, to the sandbox user (uid/gid 1000, no
groups) for the few microseconds of ``posix_spawn``, a vfork-style clone that
copies nothing, then switches back. ``posix_spawn`` also sets what ``Popen`` did
in its forked child: a new session, fresh pipes on fd 0/1/2, an empty signal
mask, ``SIGPIPE``/``SIGXFSZ`` to default, the working directory (the thread has
its own, ``unshare(CLONE_FS)``). The command is the agent's child with the pid,
pipes and session it had before, so the pump, the reaper, the deadline kill and
cancel see no difference; an exec error is the same ``OSError`` ``Popen`` raised.

Why that is safe while the thread is the user's:

- the saved uid stays 0, so the kernel refuses the user ``ptrace``, ``prlimit``
  and ``/proc/1/task/<tid>/mem`` of the thread (they need all three ids equal);
  the agent is also made non-dumpable;
- every signal is blocked in this thread: a signal the user aims at it stays
  pending for ever; ``kill(1, ...)`` is checked against the main thread, root;
- the command's own ``execve`` sets its saved uid to 1000 (real and effective
  already are), so it keeps no capability.

Where a piece is missing (an unknown machine, no ``unshare``, not root: unit
tests), ``popen`` forks as before: ``available`` says which path is in use.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .limits import GID, UID

__all__ = ["LAUNCHER", "SYSCALLS", "Launcher", "UserPopen"]

T = TypeVar("T")

SYSCALLS = {
    # machine: (setgroups, setresuid, setresgid)
    "x86_64": (116, 117, 119),
    "aarch64": (159, 147, 149),
}
_CLONE_FS = 0x200
_PR_SET_DUMPABLE = 4
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)  # Popen's restore_signals
_SKIP = (errno.ENOENT, errno.ENOTDIR)  # execvpe tries the next PATH entry on these


class UserPopen(subprocess.Popen[bytes]):
    """``Popen`` that starts its child with ``posix_spawn`` from the calling thread's credentials.

    Built only on the launcher thread (``Launcher.popen``): the child gets that
    thread's uid, gid and groups, and a new session.
    """

    def _execute_child(
        self,
        args: list[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: str | None,
        env: dict[str, str] | None,
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
        """Spawn ``args`` like ``Popen``'s child would: PATH search, cwd, pipes, setsid."""
        actions: list[tuple[Any, ...]] = [
            (os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds() if fd > 2
        ]  # close_fds: the rest are close-on-exec already (PEP 446)
        for fd, target in ((p2cread, 0), (c2pwrite, 1), (errwrite, 2)):
            if fd == -1:  # never the agent's own channel
                actions.append((os.POSIX_SPAWN_OPEN, target, os.devnull, os.O_RDWR, 0))
            else:
                actions.append((os.POSIX_SPAWN_DUP2, fd, target))
        try:
            if cwd is not None:
                os.chdir(cwd)  # this thread's own cwd, entered as the user
            self.pid = _spawn_path(args, env if env is not None else dict(os.environ), actions)
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]


def _inheritable_fds() -> list[int]:
    """This process's open descriptors that an ``execve`` would pass on."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            if os.get_inheritable(int(name)):
                found.append(int(name))
    return found


def _spawn_path(args: list[str], env: dict[str, str], actions: list[tuple[Any, ...]]) -> int:
    """``posix_spawn`` the first of ``args[0]``'s PATH candidates that exists, as execvpe would."""
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


class _Creds:
    """Raw-syscall credential switches of the calling thread only (never glibc's)."""

    def __init__(self, numbers: tuple[int, int, int]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._setgroups, self._setresuid, self._setresgid = numbers
        groups = os.getgroups()
        self._groups = (ctypes.c_uint * max(len(groups), 1))(*groups)
        self._ngroups = len(groups)
        self._gid = os.getgid()

    def _call(self, nr: int, *args: Any) -> None:
        if self._libc.syscall(nr, *args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def to_user(self) -> None:
        """Groups none, gid 1000, uid 1000 with saved uid 0 (to come back; refuses ptrace)."""
        self._call(self._setgroups, 0, None)
        self._call(self._setresgid, GID, GID, GID)
        self._call(self._setresuid, UID, UID, 0)

    def to_root(self) -> None:
        """Back to the agent's own uid, gid and groups."""
        self._call(self._setresuid, 0, 0, 0)
        self._call(self._setresgid, self._gid, self._gid, self._gid)
        self._call(self._setgroups, self._ngroups, self._groups)


class Launcher:
    """The thread that runs functions (``UserPopen``) with the sandbox user's credentials."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]]
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False
        self._ready = threading.Event()
        self.available = False

    def start(self) -> bool:
        """Start the thread once; True when it can launch (else ``popen`` forks)."""
        with self._lock:
            if not self._started:
                self._started = True
                numbers = SYSCALLS.get(platform.machine())
                if numbers is not None and os.geteuid() == 0:
                    threading.Thread(
                        target=self._run, args=(numbers,), name="launcher", daemon=True
                    ).start()
                    self._ready.wait()
        return self.available

    def popen(
        self, argv: list[str], env: dict[str, str], cwd: str, with_stdin: bool
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as the user in a new session, with pipes for its output (and stdin)."""
        kwargs: dict[str, Any] = {
            "stdin": subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "cwd": cwd,
            "env": env,
        }
        proc = self._call(lambda: UserPopen(argv, **kwargs)) if self.start() else None
        return proc or subprocess.Popen(
            argv,
            **kwargs,
            user=UID,
            group=GID,
            extra_groups=[],
            start_new_session=True,
            close_fds=True,
        )

    def _call(self, fn: Callable[[], T]) -> T | None:
        """``fn()`` on the launcher thread; None if the thread could not become the user."""
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        result: T | None = box[0]
        return result

    def _run(self, numbers: tuple[int, int, int]) -> None:  # pragma: no cover - launcher thread
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            creds = _Creds(numbers)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(_CLONE_FS) != 0 or libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
                return
            creds.to_user()
            creds.to_root()
            self.available = True
        except OSError:
            return
        finally:
            self._ready.set()
        while self._serve(creds):
            pass

    def _serve(self, creds: _Creds) -> bool:  # pragma: no cover - launcher thread
        """Run one job as the user; False (the thread ends) if a switch failed.

        A failed switch to the user answers None (the caller forks instead); a
        failed switch back leaves the thread the user's, so it runs nothing more.
        """
        fn, box, done = self._jobs.get()
        try:
            creds.to_user()
        except OSError:
            self.available = False
            box.append(None)
            done.set()
            return False
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)
        try:
            creds.to_root()
        except OSError:
            self.available = False
            return False
        finally:
            done.set()
        return True


LAUNCHER = Launcher()
