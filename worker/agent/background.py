"""Background processes: started by one request, they outlive it and its sandbox's execs.

``proc_start`` spawns a command as the sandbox user in its own session (its
own process group) and answers at once with its pid; a thread of the agent
pumps its output (stdout and stderr merged, in the order written) into a
bounded buffer, and the quick ops ``proc_list``, ``proc_logs``, ``proc_stdin``,
``proc_kill`` and ``proc_wait`` read and steer it. The agent still serves one
request at a time: ``proc_wait`` waits at most ``MAX_WAIT_S`` and the client loops.

Offsets in the output are absolute (bytes since the process started): when the
buffer is full its oldest bytes are dropped and counted, so ``proc_logs(since)``
answers exactly what follows ``since`` and says how many bytes it had to skip,
never a duplicate or a silent gap.

A background process is not one an exec started: the exec deadline kill spares
processes that existed before the exec, so it survives later execs' cleanup;
it dies with its sandbox (the container is removed with every process in it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from .errors import AgentError, Json, need
from .exec import exec_args
from .limits import READ_CHUNK
from .processes import LEADERS, start_as_user
from .reaper import REAPER

__all__ = [
    "BACKGROUND_OPS",
    "MAX_KEPT",
    "MAX_STDIN",
    "MAX_WAIT_S",
    "TABLE",
    "OutputLog",
    "Proc",
    "ProcTable",
]

MAX_WAIT_S = 10.0
"""The longest one ``proc_wait`` holds the channel (the client loops for longer)."""
MAX_KEPT = 64
"""Finished processes kept for ``wait`` and ``logs``; the oldest are forgotten first."""
MAX_STDIN = 1 << 20
_SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT}
_SIGNALS.update(HUP=signal.SIGHUP, QUIT=signal.SIGQUIT, USR1=signal.SIGUSR1, USR2=signal.SIGUSR2)


class OutputLog:
    """A bounded byte buffer with absolute offsets: the newest ``cap`` bytes are kept."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.start = 0
        """Absolute offset of ``data[0]``; equals the bytes dropped so far."""

    @property
    def end(self) -> int:
        """Absolute offset just past the newest byte (all the bytes ever written)."""
        return self.start + len(self.data)

    def append(self, chunk: bytes) -> None:
        """Keep ``chunk``; drop the oldest bytes past the cap."""
        self.data += chunk
        over = len(self.data) - self.cap
        if over > 0:
            del self.data[:over]
            self.start += over

    def read(self, since: int, limit: int) -> tuple[bytes, int, int]:
        """``(bytes from since, offset after them, bytes skipped because dropped)``."""
        since = min(max(since, 0), self.end)
        skipped = max(self.start - since, 0)
        lo = since + skipped - self.start
        out = bytes(self.data[lo : lo + limit])
        return out, since + skipped + len(out), skipped


class Proc:
    """One background process and what the agent knows of it.

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect``, ~12 ms
    of the agent's start under gVisor, before any command needs it.
    """

    def __init__(self, popen: subprocess.Popen[bytes], argv: list[str], log: OutputLog) -> None:
        self.popen, self.argv, self.log = popen, argv, log
        self.started_at = time.time()
        self.status: int | None = None
        self.done = threading.Event()
        """Set once the process has exited (its children may still write to the log)."""

    def summary(self) -> Json:
        """The process as ``proc_list`` and ``proc_wait`` show it."""
        code = os.waitstatus_to_exitcode(self.status) if self.status is not None else None
        return {
            "pid": self.popen.pid,
            "argv": self.argv,
            "running": self.status is None,
            "exit_code": code if code is not None and code >= 0 else None,
            "signal": -code if code is not None and code < 0 else None,
            "started_at": self.started_at,
            "output_end": self.log.end,
            "output_dropped": self.log.start,
        }


class ProcTable:
    """The sandbox's background processes, by pid (one table per agent)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: dict[int, Proc] = {}

    def live(self) -> int:
        """How many are still running."""
        with self.lock:
            return sum(1 for p in self.procs.values() if p.status is None)

    def get(self, req: Json) -> Proc:
        """The process that ``req['pid']`` names, or a ``not_found`` refusal."""
        pid = need(req, "pid", int)
        with self.lock:
            proc = self.procs.get(pid)
        if proc is None:
            raise AgentError(
                "not_found", f"no background process {pid} in this sandbox", field="pid", pid=pid
            )
        return proc

    def start(self, req: Json) -> Json:
        """Spawn a background process unless ``max_live`` already run: its summary."""
        argv, env, cwd = exec_args(req)
        cap, max_live = need(req, "output_cap", int), need(req, "max_live", int)
        live = self.live()
        if live >= max_live:
            return {"started": False, "live": live, "limit": max_live}
        try:
            popen = _spawn(argv, env, cwd)
        except OSError as exc:
            raise AgentError(
                "invalid_input", f"{argv[0]}: {exc.strerror}", field="argv", errno=exc.errno
            ) from exc
        proc = Proc(popen, argv, OutputLog(cap))
        with self.lock:
            self.procs[popen.pid] = proc
            self._forget_oldest()
        threading.Thread(target=_pump, args=(proc, self.lock), daemon=True).start()
        threading.Thread(target=_await, args=(proc, self.lock), daemon=True).start()
        return {"started": True, **proc.summary()}

    def _forget_oldest(self) -> None:
        finished = [pid for pid, p in self.procs.items() if p.status is not None]
        for pid in finished[: max(len(self.procs) - MAX_KEPT, 0)]:
            del self.procs[pid]

    def listing(self, req: Json) -> Json:
        """Every process kept, running or finished."""
        with self.lock:
            return {"processes": [p.summary() for p in self.procs.values()]}

    def logs(self, req: Json) -> Json:
        """Output from ``since`` (absolute), at most ``limit`` bytes, as text."""
        proc = self.get(req)
        since = need(req, "since", int)
        limit = min(int(req.get("limit") or READ_CHUNK), READ_CHUNK)
        with self.lock:
            data, offset, skipped = proc.log.read(since, limit)
            end, running = proc.log.end, proc.status is None
        text = data.decode("utf-8", errors="replace")
        return {"data": text, "since": since, "offset": offset, "skipped": skipped, "end": end,
                "running": running}  # fmt: skip

    def stdin(self, req: Json) -> Json:
        """Write to the process's stdin without blocking; close it when ``eof``."""
        proc = self.get(req)
        data = str(req.get("data") or "").encode()
        if len(data) > MAX_STDIN:
            raise AgentError("payload_too_large", f"stdin over {MAX_STDIN} bytes", field="data")
        pipe = proc.popen.stdin
        written = 0
        if pipe is None or pipe.closed:
            raise AgentError("invalid_input", "the process's stdin is closed", field="data")
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            written = os.write(pipe.fileno(), data) if data else 0
        if req.get("eof"):
            pipe.close()
        return {"written": written}

    def kill(self, req: Json) -> Json:
        """Signal the process's whole group (its children too)."""
        proc = self.get(req)
        name = str(req.get("signal") or "TERM").upper().removeprefix("SIG")
        if name not in _SIGNALS:
            raise AgentError(
                "invalid_input", f"signal must be one of {sorted(_SIGNALS)}", field="signal"
            )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, _SIGNALS[name])
        REAPER.kick()
        return {"signalled": proc.status is None, **proc.summary()}

    def wait(self, req: Json) -> Json:
        """Wait up to ``timeout`` (at most ``MAX_WAIT_S``) for the process to end."""
        proc = self.get(req)
        timeout = min(max(float(need(req, "timeout", (int, float))), 0.0), MAX_WAIT_S)
        proc.done.wait(timeout)
        return proc.summary()


def _spawn(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
    """Start a command as the user in a new session; stdout and stderr on one pipe.

    Not ``processes.spawn``: its two pipes would lose the order between the streams.
    """
    popen = start_as_user(argv, env, cwd, stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert popen.stdin is not None
    os.set_blocking(popen.stdin.fileno(), False)
    return popen


def _pump(proc: Proc, lock: threading.Lock) -> None:
    """Read the process's output into its log until EOF (every writer has gone)."""
    assert proc.popen.stdout is not None
    fd = proc.popen.stdout.fileno()
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except OSError:
            chunk = b""
        if not chunk:
            break
        with lock:
            proc.log.append(chunk)
    proc.popen.stdout.close()


def _await(proc: Proc, lock: threading.Lock) -> None:
    """Record the process's exit status once the agent's reaper has it."""
    status = None
    while status is None:
        status = REAPER.wait(proc.popen.pid, 60.0)
    LEADERS.discard(proc.popen.pid)
    with lock:
        proc.status = status
    proc.done.set()


TABLE = ProcTable()

BACKGROUND_OPS = {
    "proc_start": TABLE.start,
    "proc_list": TABLE.listing,
    "proc_logs": TABLE.logs,
    "proc_stdin": TABLE.stdin,
    "proc_kill": TABLE.kill,
    "proc_wait": TABLE.wait,
}
"""The ops of this module, merged into ``main.OPS``."""
