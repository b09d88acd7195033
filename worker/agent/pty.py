"""``pty``: an interactive login shell on a pseudo-terminal, for the life of one request.

The shell (``/bin/bash -l`` if present, else ``/bin/sh -l``) runs as the sandbox
user in /workspace, in a session of its own with the pty as its controlling
terminal. While it lives, it streams the terminal's output as ``chunk`` frames
of its request, and takes the control frames the worker sends meanwhile
(``pty_input``, ``pty_resize``, ``pty_close``: notifications, answered by
nothing) from its mailbox (``control.Mailbox``): the main loop reads fd 0 and
posts them there, so other requests of the session run beside the terminal.

It answers when the shell exits (its exit code), on ``pty_close``, when the
terminal has been idle (no input, no output) for ``idle_s`` or open for
``max_s``; in the last three cases everything the shell started is killed.
Output is read in pieces of at most ``PTY_READ`` bytes and written out before
the next read, so a slow worker stalls the shell (the kernel's pty buffer is
the only queue) instead of growing the agent's memory.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import fcntl
import os
import selectors
import struct
import subprocess
import termios
import time

from .control import INBOX, Mailbox
from .errors import AgentError, Json, need
from .framing import send
from .limits import BASE_ENV, GID, UID, WORKSPACE
from .processes import LEADERS, finish_cleanup, kill_new, user_procs
from .reaper import REAPER

__all__ = ["PTY_READ", "op_pty", "set_size", "shell_argv"]

PTY_READ = 64 << 10
_MAX_DIM = 1000
_CLOSE_GRACE_S = 0.5


def shell_argv() -> list[str]:
    """A login shell: bash when the image has it, else sh."""
    import shutil  # here: shutil loads bz2 and lzma, ~8 ms of the agent's start

    return ["/bin/bash", "-l"] if shutil.which("bash", path="/bin:/usr/bin") else ["/bin/sh", "-l"]


def set_size(fd: int, rows: int, cols: int) -> None:
    """TIOCSWINSZ on the pty (the shell gets SIGWINCH from the kernel)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _dim(req: Json, key: str) -> int:
    value = need(req, key, int)
    if not 1 <= value <= _MAX_DIM:
        raise AgentError("invalid_input", f"{key} must be 1..{_MAX_DIM}", field=key)
    return int(value)


def _take_tty() -> None:  # pragma: no cover - runs in the child
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _spawn(slave: int, term: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SANDGRID_")},
        **BASE_ENV,
        "TERM": term,
        "SHELL": shell_argv()[0],
    }
    with REAPER.cond:
        proc = subprocess.Popen(
            shell_argv(),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=WORKSPACE,
            env=env,
            user=UID,
            group=GID,
            extra_groups=[],
            start_new_session=True,
            preexec_fn=_take_tty,
            close_fds=True,
        )
        REAPER.wanted.add(proc.pid)
        LEADERS.add(proc.pid)
    REAPER.kick()
    return proc


class _Term:
    """One terminal's state: the master fd, the shell, and why it ended."""

    def __init__(self, rid: object, master: int, proc: subprocess.Popen[bytes]) -> None:
        self.rid, self.master, self.proc = rid, master, proc
        self.mailbox = INBOX.get(rid) or Mailbox("pty")
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.reason = ""
        self.bytes_out = 0

    def output(self) -> bool:
        """Forward what the pty has; False at its end (the shell and its children left)."""
        try:
            data = os.read(self.master, PTY_READ)
        except BlockingIOError:
            return True
        except OSError:  # EIO: no process holds the slave any more
            return False
        if not data:
            return False
        self.bytes_out += len(data)
        text = self.utf8.decode(data)
        if text:
            send({"id": self.rid, "event": "chunk", "stream": "stdout", "data": text})
        return True

    def control(self) -> bool:
        """Apply the control frames in the mailbox; False when the terminal must end."""
        return all(self._apply(frame) for frame in self.mailbox.take())

    def _apply(self, frame: Json | None) -> bool:
        if frame is None:
            self.reason = "channel_closed"
            return False
        op = frame.get("op")
        if op == "pty_input":
            data = base64.b64decode(str(frame.get("data_b64", "")))
            view = memoryview(data)
            while view:
                view = view[os.write(self.master, view) :]
        elif op == "pty_resize":
            with contextlib.suppress(AgentError, OSError):
                set_size(self.master, _dim(frame, "rows"), _dim(frame, "cols"))
        elif op == "pty_close":
            self.reason = "closed"
            return False
        return True


def op_pty(req: Json) -> Json:
    """Run a login shell on a pty until it exits or is closed; the ``pty`` reply."""
    rows, cols = _dim(req, "rows"), _dim(req, "cols")
    term = str(req.get("term") or "xterm-256color")
    idle_s = float(need(req, "idle_s", (int, float)))
    max_s = float(need(req, "max_s", (int, float)))
    finish_cleanup()
    before = set(user_procs())
    master, slave = os.openpty()
    try:
        set_size(master, rows, cols)
        proc = _spawn(slave, term)
    except OSError as exc:
        os.close(master)
        raise AgentError("sandbox_error", f"cannot start a shell: {exc.strerror}") from exc
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    t = _Term(req.get("id"), master, proc)
    start = time.monotonic()
    try:
        _loop(t, start, idle_s, max_s)
    finally:
        status = _finish(t, before)
        LEADERS.discard(proc.pid)
        os.close(master)
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return {
        "exit_code": code if code is not None and code >= 0 else None,
        "signal": -code if code is not None and code < 0 else None,
        "reason": t.reason,
        "bytes_out": t.bytes_out,
        "duration_ms": round((time.monotonic() - start) * 1000, 3),
    }


def _loop(t: _Term, start: float, idle_s: float, max_s: float) -> None:
    sel = selectors.DefaultSelector()
    sel.register(t.master, selectors.EVENT_READ, "out")
    sel.register(t.mailbox.fileno(), selectors.EVENT_READ, "in")
    last = start
    try:
        while True:
            now = time.monotonic()
            if now - start >= max_s:
                t.reason = "max_time"
                return
            if now - last >= idle_s:
                t.reason = "idle"
                return
            wait = min(start + max_s, last + idle_s) - now
            for key, _ in sel.select(max(wait, 0.0)):
                last = time.monotonic()
                alive = t.output() if key.data == "out" else t.control()
                if not alive:
                    t.reason = t.reason or "exited"
                    return
    finally:
        sel.close()


def _finish(t: _Term, before: set[tuple[int, int]]) -> int | None:
    """The shell's wait status; unless it exited, kill everything it started first."""
    if t.reason == "exited":
        return REAPER.wait(t.proc.pid, _CLOSE_GRACE_S)
    with contextlib.suppress(OSError):
        os.killpg(t.proc.pid, 1)  # SIGHUP, as a terminal hanging up
    status = REAPER.wait(t.proc.pid, _CLOSE_GRACE_S)
    kill_new(t.proc.pid, before)
    return status if status is not None else REAPER.wait(t.proc.pid, 0.1)
