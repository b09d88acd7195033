"""The sandbox user's processes: start them, run a function as the user, kill them all.

The agent is root with SETUID, SETGID and KILL only; everything the user gets
to run runs as uid/gid 1000: a command in a child, a file operation or a scan
on a thread of the agent acting as the user (``as_user_files``: no fork, which
cost ~2.5 ms under runc and ~20 ms under gVisor per operation; a fork where
per-thread ids are not available). A deadline kill takes every process the
command started.

Requests run at once, so a deadline kill must spare what the other requests
run. Every command starts as the leader of a session of its own; ``LEADERS``
holds the leaders of what runs now (execs, terminals, background processes,
the kernel host). A kill takes the command's new processes but those in
another live leader's session: a process that left its session (``setsid``, a
daemon) while a command beside it timed out goes with that command, as it
would have with no other turn running (docs/agent-protocol.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import AgentError, Json
from .framing import LENGTH, Payload, write_all
from .launcher import LAUNCHER
from .limits import CLEANUP_WAIT_S, GID, KILL_BUDGET_S, PIDS_CURRENT_FILE, PIPE_SIZE, UID
from .reaper import REAPER
from .threadcreds import acting_as_user, supported

__all__ = [
    "IN_THREAD",
    "LEADERS",
    "Cleanup",
    "Leaders",
    "as_user",
    "as_user_files",
    "as_user_here",
    "finish_cleanup",
    "kill_new",
    "reply_of",
    "spared",
    "spawn",
    "start_as_user",
    "tasks_besides_agent",
    "user_child",
    "user_procs",
    "user_sessions",
]


class Leaders:
    """The session leaders of what runs now: their sessions are spared by another's kill."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pids: set[int] = set()

    def add(self, pid: int) -> None:
        with self._lock:
            self._pids.add(pid)

    def discard(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def others(self, pid: int) -> frozenset[int]:
        """The live leaders but ``pid``."""
        with self._lock:
            return frozenset(self._pids - {pid})


LEADERS = Leaders()


def spared(pgid: int) -> frozenset[int]:
    """The leaders a kill of ``pgid``'s command spares: every live one but its own.

    Read under the reaper's lock, which a spawn holds until its leader is in
    ``LEADERS``: a process seen in a scan made before this call has its leader
    here if that leader is a command's."""
    with REAPER.cond:
        return LEADERS.others(pgid)


def user_procs() -> dict[tuple[int, int], bool]:
    """Processes of uid 1000 as ``{(pid, starttime): is_zombie}``."""
    return {key: zombie for key, (zombie, _) in user_sessions().items()}


def user_sessions() -> dict[tuple[int, int], tuple[bool, int]]:
    """Processes of uid 1000 as ``{(pid, starttime): (is_zombie, session id)}``.

    Read from ``/proc/<pid>/status`` rather than the directory owner, which a
    process can turn to root with ``prctl(PR_SET_DUMPABLE, 0)``.
    """
    found: dict[tuple[int, int], tuple[bool, int]] = {}
    launcher = str(LAUNCHER.pid())  # root, like PID 1: two reads saved per exec
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1" or name == launcher:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{name}/status", "rb") as f:
                uids = next(ln for ln in f if ln.startswith(b"Uid:")).split()[1:3]
        except (OSError, StopIteration, IndexError):
            continue
        if str(UID).encode() in uids:
            found[(int(name), int(fields[19]))] = (fields[0] in (b"Z", b"X"), int(fields[3]))
    return found


class Cleanup:
    """Set when a deadline kill ran out of budget: the next exec finishes it first."""

    pending = False


def kill_new(pgid: int, before: set[tuple[int, int]]) -> None:
    """SIGKILL the group, then every new user process, until none is left.

    With no older user process to spare (the usual case), ``kill(-1)`` as the
    user kills them all at once and the pids cgroup says when they are gone: no
    ``/proc`` walk, which stalls under gVisor while a fork bomb dies. If the
    budget runs out first, the reply goes anyway and the next exec waits for
    the cleanup to finish (``finish_cleanup``).
    """
    end = time.monotonic() + KILL_BUDGET_S
    LAUNCHER.stop(quiet=True)  # its children (the command's leader) become the agent's
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    if not before and not spared(pgid) and tasks_besides_agent() is not None:
        done = _kill_all_until(end, pgid)
        if done is not None:  # else another command started: spare it, one by one below
            Cleanup.pending = not done
            return
    while True:
        found = user_sessions()
        others = spared(pgid)  # after the scan: a command started meanwhile is known by now
        procs = {k: z for k, (z, sid) in found.items() if k not in before and sid not in others}
        alive = [pid for (pid, _), zombie in procs.items() if not zombie]
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        REAPER.kick()
        if not procs or time.monotonic() > end or (not alive and time.monotonic() > end - 0.6):
            return
        time.sleep(0.002)


def _kill_all_until(end: float, pgid: int) -> bool | None:
    """Kill every user process until there is none (True) or ``end`` passes (False);
    None as soon as a command other than ``pgid``'s runs (it must be spared)."""
    while tasks_besides_agent() != 0:
        if time.monotonic() > end:
            return False
        if not _kill_all_as_user(end, pgid):
            return None
        time.sleep(0.002)
    return True


def finish_cleanup() -> None:
    """Before an exec: make sure the last timed-out exec left nothing running (when
    nothing else runs: a kill of everything would take the other requests' too)."""
    if Cleanup.pending and not spared(0):
        done = _kill_all_until(time.monotonic() + CLEANUP_WAIT_S, 0)
        if done is False:
            raise AgentError("sandbox_error", "processes of a timed-out exec are still dying")
        Cleanup.pending = done is None  # None: a command started meanwhile, finish later


def _become_user() -> None:
    os.setgroups([])
    os.setgid(GID)
    os.setuid(UID)


def _kill_all_as_user(end: float, pgid: int) -> bool:
    """``kill(-1, SIGKILL)`` from a child running as the user (spares only itself);
    False, killing nothing, when a command other than ``pgid``'s runs (checked under
    the lock every spawn holds until its leader is known).

    The lock is held until the child has sent its kill (it says so on a pipe), not
    only while it forks: a command spawned after the check would be killed too."""
    with REAPER.cond:
        if LEADERS.others(pgid):
            return False
        rfd, wfd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(rfd)
            os.close(wfd)
            return True
        if pid == 0:  # pragma: no cover - child
            with contextlib.suppress(BaseException):
                os.close(rfd)
                _become_user()
                os.kill(-1, signal.SIGKILL)
                os.write(wfd, b"k")
            os._exit(0)
        os.close(wfd)
        REAPER.wanted.add(pid)
        _until_killed(rfd, pid, end)
    REAPER.kick()
    REAPER.wait(pid, max(end - time.monotonic(), 0.01))
    return True


def _until_killed(rfd: int, pid: int, end: float) -> None:
    """Wait for the killer child's word (or its end); past ``end`` it is killed, so
    that it cannot kill later what starts once the lock is let go."""
    try:
        ready, _, _ = select.select([rfd], [], [], max(end - time.monotonic(), 0.01))
        if not ready:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    finally:
        os.close(rfd)


def tasks_besides_agent() -> int | None:
    """Tasks in the sandbox's pids cgroup that are not the agent's threads or its launcher."""
    try:
        with open(PIDS_CURRENT_FILE) as f:
            total = int(f.read())
        return total - len(os.listdir("/proc/self/task")) - LAUNCHER.tasks()
    except (OSError, ValueError):
        return None


def start_as_user(
    argv: list[str], env: dict[str, str], cwd: str, *, stdin: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start a command as the user in a new session (its own process group),
    known to the reaper; stdout is a pipe, ``stdin`` and ``stderr`` as given.

    The launcher host starts it without forking the agent when it is ready,
    else ``Popen`` forks as the user (``launcher.Launcher.popen``).
    """
    with REAPER.cond:  # the reaper must know the pid before it can reap it
        proc = LAUNCHER.popen(argv, env, cwd, stdin=stdin, stderr=stderr)  # launcher.py
        REAPER.wanted.add(proc.pid)
        LEADERS.add(proc.pid)  # under the reaper's lock: ``spared`` reads them under it
    REAPER.kick()
    return proc


def spawn(
    argv: list[str], env: dict[str, str], cwd: str, with_stdin: bool
) -> subprocess.Popen[bytes]:
    """An exec's command: ``start_as_user`` with stdout and stderr on two pipes."""
    stdin = subprocess.PIPE if with_stdin else subprocess.DEVNULL
    proc = start_as_user(argv, env, cwd, stdin=stdin, stderr=subprocess.PIPE)
    for pipe in (proc.stdout, proc.stderr):  # fewer, larger reads (each costs more in gVisor)
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)  # type: ignore[union-attr]
    return proc


def as_user(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in a forked child that has dropped to uid/gid 1000."""
    rfd, wfd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(rfd)
        os.close(wfd)
        raise AgentError("sandbox_error", f"cannot fork: {exc.strerror}") from exc
    if pid == 0:  # pragma: no cover - child
        os.close(rfd)
        user_child(wfd, fn, args)
    REAPER.kick()
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        raw = f.read()
    try:
        reply = _child_reply(raw)
    except ValueError:
        raise AgentError("sandbox_error", "file operation died without an answer") from None
    return _result(reply)


def _child_bytes(reply: Json) -> bytes:
    """A user child's reply on its pipe: JSON, or for a ``Payload`` result ``B``,
    the length of its fields' JSON, that JSON and the payload's bytes (no base64)."""
    result = reply.get("result")
    if not isinstance(result, Payload):
        return json.dumps(reply).encode()
    fields = json.dumps(result.fields).encode()
    return b"B" + LENGTH.pack(len(fields)) + fields + result.data


def _child_reply(raw: bytes) -> Json:
    """The reply ``_child_bytes`` wrote (``ValueError`` when it is not one)."""
    if raw[:1] != b"B":
        reply: Json = json.loads(raw)
        return reply
    if len(raw) < 1 + LENGTH.size:
        raise ValueError("truncated reply")
    (n,) = LENGTH.unpack_from(raw, 1)
    start = 1 + LENGTH.size
    if start + n > len(raw):
        raise ValueError("truncated reply")
    return {"ok": True, "result": Payload(json.loads(raw[start : start + n]), raw[start + n :])}


def user_child(wfd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:  # pragma: no cover
    """In a forked child: become the user, write ``fn(*args)``'s reply to ``wfd``, exit."""
    try:
        _become_user()
        os.umask(0o022)
        reply = reply_of(fn, args)
    except OSError as exc:
        reply = _error_reply(exc)
    try:
        write_all(wfd, _child_bytes(reply))
    finally:
        os._exit(0)


def as_user_here(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on this thread acting as the user (``threadcreds``): no fork.

    The same result and errors as ``as_user``. Only for code that reaches files
    and nothing else (no ``umask``: that is the process's, no children).
    """
    try:
        with acting_as_user():
            reply = reply_of(fn, args)
    except OSError as exc:
        reply = _error_reply(exc)
    return _result(reply)


IN_THREAD = os.geteuid() == 0 and supported()
"""Whether a thread of the agent can act as the user (root, a known machine)."""


def as_user_files(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a function that reaches files and nothing else as the user: on this
    thread (``as_user_here``) where it can, else in a forked child (``as_user``).

    The agent's umask is the user child's (0o022, set at start), so what it
    creates has the same modes either way."""
    if IN_THREAD:
        return as_user_here(fn, *args)
    return as_user(fn, *args)


def reply_of(fn: Callable[..., Any], args: tuple[Any, ...]) -> Json:
    """``fn(*args)`` as the reply ``as_user`` reads: its result, or its error's body.

    Also how the host-directory double of the tests (tests/support/hostdir.py)
    turns the agent's own file functions into the replies the worker sees."""
    try:
        return {"ok": True, "result": fn(*args)}
    except AgentError as exc:
        return {"ok": False, "error": exc.body()}
    except OSError as exc:
        return _error_reply(exc)
    except ValueError as exc:
        return {"ok": False, "error": AgentError("invalid_input", str(exc)).body()}
    except Exception as exc:
        error = AgentError("sandbox_error", f"{type(exc).__name__}: {exc}")
        return {"ok": False, "error": error.body()}


def _error_reply(exc: OSError) -> Json:
    """An OS error as the grid's refusal: a path that is not there is ``not_found``
    (as over REST: 404), any other (a file in the way, a loop) ``invalid_input``."""
    where = exc.filename if isinstance(exc.filename, str) else ""  # not a dir fd's number
    code = "not_found" if exc.errno == errno.ENOENT else "invalid_input"
    error = AgentError(code, f"{where}: {os.strerror(exc.errno or 0)}", path=where, errno=exc.errno)
    return {"ok": False, "error": error.body()}


def _result(reply: Json) -> Any:
    if not reply["ok"]:
        err = reply["error"]
        raise AgentError(err["code"], err["message"], **(err.get("context") or {}))
    return reply["result"]
