"""``exec``: run one command as the user under a deadline and output caps.

The hot path of every turn: spawn, pump both pipes with ``selectors`` on the
request's thread (streaming chunks when asked), then wait, kill what the command
left on a timeout, and report exit code, signal, OOM and a full workspace.
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import IO, Any

from .control import INBOX, Control, Mailbox
from .errors import AgentError, Json, need
from .framing import send
from .limits import BASE_ENV, ENOSPC_TEXT, EXIT_GRACE_S, OOM_FILES, READ_CHUNK, WORKSPACE, inside
from .memory import MEMORY
from .processes import LEADERS, finish_cleanup, kill_new, spawn, user_procs
from .reaper import REAPER

__all__ = ["Output", "exec_args", "oom_count", "op_exec", "pump", "workspace_nearly_full"]

_SCRATCH = threading.local()


def oom_count() -> int | None:
    """OOM kills so far: the agent's own under gVisor, else the memory cgroup's (v1
    or v2); None if unknown."""
    if MEMORY.active:
        return MEMORY.kills
    for path in OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def workspace_nearly_full() -> bool:
    """Whether under 1 % of the workspace is left: reported with every exec."""
    try:
        st = os.statvfs(WORKSPACE)
    except OSError:
        return False
    return st.f_blocks > 0 and st.f_bavail < st.f_blocks / 100


def exec_args(req: Json) -> tuple[list[str], dict[str, str], str]:
    """The checked argv, environment and working directory of an exec request."""
    argv = need(req, "argv", list)
    env = req.get("env") or {}
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise AgentError("invalid_input", "argv must be a non-empty list of strings", field="argv")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "\0" not in k + v and "=" not in k
        for k, v in env.items()
    ):
        raise AgentError("invalid_input", "env must map names to strings", field="env")
    cwd = os.path.realpath(os.path.join(WORKSPACE, str(req.get("cwd") or ".")))
    if not inside(cwd, (WORKSPACE,)):
        raise AgentError(
            "path_outside_workspace",
            f"cwd {req.get('cwd')!r} leaves /workspace",
            path=req.get("cwd"),
        )
    if not os.path.isdir(cwd):
        raise AgentError(
            "invalid_input", f"cwd {req.get('cwd')!r} is not a directory", path=req.get("cwd")
        )
    base = {k: v for k, v in os.environ.items() if not k.startswith("SANDGRID_")}
    return argv, {**base, **BASE_ENV, **env}, cwd


class Output:
    """One captured stream: kept up to the cap, then drained and discarded."""

    def __init__(self, name: str, cap: int, rid: Any, stream: bool) -> None:
        self.name, self.cap, self.rid, self.stream = name, cap, rid, stream
        self.data = bytearray()
        self.truncated = False
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, chunk: bytes | memoryview) -> None:
        """Keep what fits under the cap (streamed as text when asked); the rest truncates."""
        room = self.cap - len(self.data)
        kept = chunk[: max(room, 0)]
        if len(kept) < len(chunk):
            self.truncated = True
        if kept:
            self.data += kept
            if self.stream:
                text = self._utf8.decode(kept)
                if text:
                    send({"id": self.rid, "event": "chunk", "stream": self.name, "data": text})

    def text(self) -> str:
        """What was kept, as text (invalid UTF-8 replaced)."""
        return self.data.decode("utf-8", errors="replace")


def pump(
    proc: subprocess.Popen[bytes],
    stdin: bytes | None,
    outs: list[Output],
    deadline: float,
    control: Control | None = None,
) -> bool:
    """Feed stdin, read both streams until EOF or deadline; True when on time.

    With ``control``, the request's mailbox is watched too, so that a ``cancel``
    of this exec is read while it runs: the pump stops at once (False,
    ``control.cancelled``).
    """
    sel = selectors.DefaultSelector()
    if control is not None:
        box = INBOX.get(control.rid) or Mailbox("exec")
        sel.register(box.fileno(), selectors.EVENT_READ, (control, box))
    assert proc.stdout is not None and proc.stderr is not None
    for pipe, out in ((proc.stdout, outs[0]), (proc.stderr, outs[1])):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe, selectors.EVENT_READ, out)
    pending = memoryview(stdin or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        if pending:
            sel.register(proc.stdin, selectors.EVENT_WRITE, None)
        else:
            proc.stdin.close()
    exited_at: float | None = None
    try:
        while _pumping(sel):
            now = time.monotonic()
            if now >= deadline or (control is not None and control.cancelled):
                return False
            if exited_at is None and proc.pid in REAPER.status:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                return True  # background descendants hold the pipes: leave them be
            wait = min(deadline - now, 0.05 if exited_at is None else EXIT_GRACE_S)
            for key, _ in sel.select(max(wait, 0.0)):
                pending = _pump_one(sel, key, pending)
        return True
    finally:
        sel.close()


def _scratch() -> bytearray:
    """This thread's read buffer (requests run on several threads at once)."""
    buf: bytearray | None = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = bytearray(READ_CHUNK)
    return buf


def _pumping(sel: selectors.BaseSelector) -> bool:
    """Whether a pipe of the command is still open (the mailbox alone does not count)."""
    return any(not isinstance(k.data, tuple) for k in sel.get_map().values())


def _pump_one(
    sel: selectors.BaseSelector, key: selectors.SelectorKey, pending: memoryview
) -> memoryview:
    if isinstance(key.data, tuple):  # notifications from the worker
        control, box = key.data
        for frame in box.take():
            control.on_frame(frame)
        if control.eof:
            sel.unregister(key.fileobj)
        return pending
    pipe: IO[bytes] = key.fileobj  # type: ignore[assignment]
    if key.data is None:  # stdin
        try:
            pending = pending[os.write(pipe.fileno(), pending[:READ_CHUNK]) :]
        except (BrokenPipeError, BlockingIOError) as exc:
            pending = memoryview(b"") if isinstance(exc, BrokenPipeError) else pending
        if not pending:
            sel.unregister(pipe)
            pipe.close()
        return pending
    scratch = _scratch()
    try:
        n = os.readv(pipe.fileno(), [scratch])  # one buffer per thread: no garbage per read
    except BlockingIOError:
        return pending
    if n:
        key.data.feed(memoryview(scratch)[:n])
    else:
        sel.unregister(pipe)
    return pending


def op_exec(req: Json) -> Json:
    """Run one command to its end or deadline; the ``exec`` reply."""
    argv, env, cwd = exec_args(req)
    timeout = float(need(req, "timeout", (int, float)))
    cap = int(need(req, "output_cap", int))
    stdin = req.get("stdin")
    outs = [Output(n, cap, req.get("id"), bool(req.get("stream"))) for n in ("stdout", "stderr")]
    finish_cleanup()
    before = set(user_procs())
    oom0 = oom_count()
    start = time.monotonic()
    try:
        proc = spawn(argv, env, cwd, stdin is not None)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return _exec_reply(
            code,
            None,
            outs,
            start,
            timed_out=False,
            oom=False,
            spawn_error=f"{argv[0]}: {exc.strerror}",
        )
    control = Control(req.get("id"))
    raw_in = stdin.encode() if isinstance(stdin, str) else None
    try:
        on_time = pump(proc, raw_in, outs, start + timeout, control)
        left = max(start + timeout - time.monotonic(), 0)
        status = REAPER.wait(proc.pid, left) if on_time else None
        timed_out = status is None and not control.cancelled
        if status is None:  # deadline or cancel: everything the command started goes
            kill_new(proc.pid, before)
            status = REAPER.wait(proc.pid, 0.1)
    finally:
        LEADERS.discard(proc.pid)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            pipe.close()
    proc.returncode = 0 if status is None else os.waitstatus_to_exitcode(status)
    sig = -proc.returncode if proc.returncode < 0 else None
    oom1 = oom_count()
    oom = oom1 > oom0 if oom0 is not None and oom1 is not None else (sig == 9 and not timed_out)
    exit_code = None if timed_out or sig is not None else proc.returncode
    if control.cancelled:  # killed on request: not an OOM kill, not a timeout
        exit_code, sig, oom = None, signal.SIGKILL, False
    reply = _exec_reply(
        exit_code, signal.SIGKILL if timed_out else sig, outs, start, timed_out=timed_out, oom=oom
    )
    reply["cancelled"] = control.cancelled
    return reply


def _exec_reply(
    exit_code: int | None,
    sig: int | None,
    outs: list[Output],
    start: float,
    *,
    timed_out: bool,
    oom: bool,
    spawn_error: str = "",
) -> Json:
    if spawn_error:
        outs[1].feed(f"sandgrid: {spawn_error}\n".encode())
    stderr = bytes(outs[1].data)
    return {
        "exit_code": exit_code,
        "stdout": outs[0].text(),
        "stderr": outs[1].text(),
        "stdout_truncated": outs[0].truncated,
        "stderr_truncated": outs[1].truncated,
        "duration_ms": round((time.monotonic() - start) * 1000, 3),
        "timed_out": timed_out,
        "oom_killed": oom,
        "signal": int(sig) if sig is not None else None,
        "workspace_full": ENOSPC_TEXT in stderr or workspace_nearly_full(),
    }
