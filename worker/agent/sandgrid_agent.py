"""sandgrid's in-sandbox agent: PID 1 of every sandbox.

Single file, stdlib only, Python 3.11. The worker bind-mounts it read-only at
``/opt/sandgrid/agent.py`` and the image starts it as root with only the
capabilities SETUID, SETGID and KILL. It speaks the framed JSON protocol of
``docs/agent-protocol.md`` on fd 0/1 (the Docker attach channel) and writes
diagnostics to fd 2.

Why it looks the way it does:

- One request at a time, in the main thread: the worker serialises requests
  per container, and a single thread cannot be starved of threads by a fork
  bomb (the pids limit counts the agent's threads too). An exec pumps its
  pipes with ``selectors`` in that same thread.
- PID 1 must reap every zombie; a reaper thread does ``waitpid(-1)`` and hands
  the statuses of the processes the agent is waiting for to their waiters, so
  ``subprocess`` is used to spawn but never to wait.
- File operations run in a forked child that drops to uid/gid 1000, so user
  permissions and symlinks apply exactly as they would to user code; the
  agent itself has no DAC override and could not read the user's files anyway.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import fcntl
import functools
import hashlib
import io
import json
import os
import secrets
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

VERSION = 1
WORKSPACE = "/workspace"
HOME = "/home/sandbox"
ROOTS = (WORKSPACE, HOME)
UID = GID = 1000
MAX_FRAME = 64 << 20
MAX_RAW_PAYLOAD = 46 << 20  # raw bytes that still fit a frame once base64-encoded
MAX_LIST_ENTRIES = 100_000
KILL_BUDGET_S = 0.8  # the reply must come within timeout + 1 s
CLEANUP_WAIT_S = 5.0
EXIT_GRACE_S = 0.1  # read on after the command exits, while descendants hold its pipes
READ_CHUNK = 1 << 20
PIPE_SIZE = 1 << 20
SCRATCH = bytearray(READ_CHUNK)
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": HOME,
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
}
PIDS_MAX_FILE = "/sys/fs/cgroup/pids/pids.max"
PIDS_CURRENT_FILE = "/sys/fs/cgroup/pids/pids.current"
OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
ENOSPC_TEXT = b"No space left on device"

Json = dict[str, Any]


class AgentError(Exception):
    """An error reply: ``code`` is one of ``sandgrid.errors.ErrorCode``."""

    def __init__(self, code: str, message: str, **context: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.context = code, message, context

    def body(self) -> Json:
        return {"code": self.code, "message": self.message, "context": self.context}


def log(msg: str) -> None:
    os.write(2, f"sandgrid-agent: {msg}\n".encode(errors="replace"))


# ---- framing ----------------------------------------------------------------

_OUT_LOCK = threading.Lock()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def compact_json(obj: Json) -> bytes:
    """Compact UTF-8 JSON; the ASCII form first, as it is the same bytes unless
    something needs a ``\\u`` escape, and 4x faster on long base64 strings."""
    fast = json.dumps(obj, separators=(",", ":"))
    if "\\u" not in fast:
        return fast.encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def send(obj: Json) -> None:
    data = compact_json(obj)
    if len(data) > MAX_FRAME:
        err = AgentError("payload_too_large", f"reply of {len(data)} bytes exceeds the frame cap")
        data = json.dumps({"id": obj.get("id"), "ok": False, "error": err.body()}).encode()
    with _OUT_LOCK:
        write_all(1, struct.pack(">I", len(data)) + data)


def read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv() -> Json | None:
    """The next request, ``None`` at EOF; an oversized frame is read and refused."""
    head = read_exact(0, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        while size:
            size -= len(read_exact(0, min(size, 1 << 20)) or b"x" * size)
        return {"op": "_too_large"}
    body = read_exact(0, size)
    if body is None:
        return None
    obj = json.loads(body)
    if not isinstance(obj, dict):
        return {"op": "_bad"}
    return obj


# ---- PID 1 duties: reaping ----------------------------------------------------


class Reaper:
    """Reap every child (PID 1 inherits all orphans); keep the statuses we await."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.wanted: set[int] = set()
        self.status: dict[int, int] = {}
        self._kick = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="reaper", daemon=True).start()

    def kick(self) -> None:
        self._kick.set()

    def _run(self) -> None:
        while True:
            self._kick.wait()
            self._kick.clear()
            while True:
                try:
                    pid, st = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                except InterruptedError:  # pragma: no cover - PEP 475 retries
                    continue
                with self.cond:
                    if pid in self.wanted:
                        self.wanted.discard(pid)
                        self.status[pid] = st
                        self.cond.notify_all()

    def wait(self, pid: int, timeout: float) -> int | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.status, timeout)
            return self.status.pop(pid, None)


REAPER = Reaper()


# ---- processes of the sandbox user ------------------------------------------


def user_procs() -> dict[tuple[int, int], bool]:
    """Processes of uid 1000 as ``{(pid, starttime): is_zombie}``.

    Read from ``/proc/<pid>/status`` rather than the directory owner, which a
    process can turn to root with ``prctl(PR_SET_DUMPABLE, 0)``.
    """
    found: dict[tuple[int, int], bool] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{name}/status", "rb") as f:
                uids = next(ln for ln in f if ln.startswith(b"Uid:")).split()[1:3]
        except (OSError, StopIteration, IndexError):
            continue
        if str(UID).encode() in uids:
            found[(int(name), int(fields[19]))] = fields[0] in (b"Z", b"X")
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
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    if not before and tasks_besides_agent() is not None:
        Cleanup.pending = not kill_all_until(end)
        return
    while True:
        procs = {k: z for k, z in user_procs().items() if k not in before}
        alive = [pid for (pid, _), zombie in procs.items() if not zombie]
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        REAPER.kick()
        if not procs or time.monotonic() > end or (not alive and time.monotonic() > end - 0.6):
            return
        time.sleep(0.002)


def kill_all_until(end: float) -> bool:
    """Kill every user process until there is none (True) or ``end`` passes (False)."""
    while tasks_besides_agent() != 0:
        if time.monotonic() > end:
            return False
        kill_all_as_user(end)
        time.sleep(0.002)
    return True


def finish_cleanup() -> None:
    """Before an exec: make sure the last timed-out exec left nothing running."""
    if Cleanup.pending:
        if not kill_all_until(time.monotonic() + CLEANUP_WAIT_S):
            raise AgentError("sandbox_error", "processes of a timed-out exec are still dying")
        Cleanup.pending = False


def kill_all_as_user(end: float) -> None:
    """``kill(-1, SIGKILL)`` from a child running as the user (spares only itself)."""
    with REAPER.cond:
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # pragma: no cover - child
            with contextlib.suppress(BaseException):
                os.setgroups([])
                os.setgid(GID)
                os.setuid(UID)
                os.kill(-1, signal.SIGKILL)
            os._exit(0)
        REAPER.wanted.add(pid)
    REAPER.kick()
    REAPER.wait(pid, max(end - time.monotonic(), 0.01))


def tasks_besides_agent() -> int | None:
    """Tasks in the sandbox's pids cgroup that are not the agent's threads."""
    try:
        with open(PIDS_CURRENT_FILE) as f:
            total = int(f.read())
        return total - len(os.listdir("/proc/self/task"))
    except (OSError, ValueError):
        return None


def oom_count() -> int | None:
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
    try:
        st = os.statvfs(WORKSPACE)
    except OSError:
        return False
    return st.f_blocks > 0 and st.f_bavail < st.f_blocks / 100


# ---- exec ---------------------------------------------------------------------


def need(req: Json, key: str, kind: type | tuple[type, ...]) -> Any:
    value = req.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise AgentError("invalid_input", f"field {key!r} must be {kind}", field=key)
    return value


def exec_args(req: Json) -> tuple[list[str], dict[str, str], str]:
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
        return self.data.decode("utf-8", errors="replace")


def pump(
    proc: subprocess.Popen[bytes], stdin: bytes | None, outs: list[Output], deadline: float
) -> bool:
    """Feed stdin, read both streams until EOF or deadline; True when on time."""
    sel = selectors.DefaultSelector()
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
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return False
            if exited_at is None and proc.pid in REAPER.status:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                return True  # background descendants hold the pipes: leave them be
            wait = min(deadline - now, 0.05 if exited_at is None else EXIT_GRACE_S)
            for key, _ in sel.select(max(wait, 0.0)):
                pending = pump_one(sel, key, pending)
        return True
    finally:
        sel.close()


def pump_one(
    sel: selectors.BaseSelector, key: selectors.SelectorKey, pending: memoryview
) -> memoryview:
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
    try:
        n = os.readv(pipe.fileno(), [SCRATCH])  # one buffer for all reads: no garbage per read
    except BlockingIOError:
        return pending
    if n:
        key.data.feed(memoryview(SCRATCH)[:n])
    else:
        sel.unregister(pipe)
    return pending


def spawn(
    argv: list[str], env: dict[str, str], cwd: str, with_stdin: bool
) -> subprocess.Popen[bytes]:
    with REAPER.cond:  # the reaper must know the pid before it can reap it
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            user=UID,
            group=GID,
            extra_groups=[],
            start_new_session=True,
            close_fds=True,
        )
        REAPER.wanted.add(proc.pid)
    REAPER.kick()
    for pipe in (proc.stdout, proc.stderr):  # fewer, larger reads (each costs more in gVisor)
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)  # type: ignore[union-attr]
    return proc


def op_exec(req: Json) -> Json:
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
        return exec_reply(
            code,
            None,
            outs,
            start,
            timed_out=False,
            oom=False,
            spawn_error=f"{argv[0]}: {exc.strerror}",
        )
    on_time = pump(proc, stdin.encode() if isinstance(stdin, str) else None, outs, start + timeout)
    status = REAPER.wait(proc.pid, max(start + timeout - time.monotonic(), 0)) if on_time else None
    timed_out = status is None
    if timed_out:
        kill_new(proc.pid, before)
        status = REAPER.wait(proc.pid, 0.1)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            pipe.close()
    proc.returncode = 0 if status is None else os.waitstatus_to_exitcode(status)
    sig = -proc.returncode if proc.returncode < 0 else None
    oom1 = oom_count()
    oom = oom1 > oom0 if oom0 is not None and oom1 is not None else (sig == 9 and not timed_out)
    exit_code = None if timed_out or sig is not None else proc.returncode
    return exec_reply(
        exit_code, signal.SIGKILL if timed_out else sig, outs, start, timed_out=timed_out, oom=oom
    )


def exec_reply(
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


# ---- running as the sandbox user ---------------------------------------------


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
        reply = json.loads(raw)
    except ValueError:
        raise AgentError("sandbox_error", "file operation died without an answer") from None
    if not reply["ok"]:
        raise AgentError(**reply["error"])
    return reply["result"]


def user_child(wfd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:  # pragma: no cover
    try:
        os.setgroups([])
        os.setgid(GID)
        os.setuid(UID)
        os.umask(0o022)
        reply: Json = {"ok": True, "result": fn(*args)}
    except AgentError as exc:
        reply = {"ok": False, "error": exc.body()}
    except OSError as exc:
        name = os.strerror(exc.errno or 0)
        where = exc.filename or ""
        reply = {
            "ok": False,
            "error": AgentError(
                "invalid_input", f"{where}: {name}", path=where, errno=exc.errno
            ).body(),
        }
    except ValueError as exc:
        reply = {"ok": False, "error": AgentError("invalid_input", str(exc)).body()}
    except Exception as exc:
        reply = {
            "ok": False,
            "error": AgentError("sandbox_error", f"{type(exc).__name__}: {exc}").body(),
        }
    try:
        write_all(wfd, json.dumps(reply).encode())
    finally:
        os._exit(0)


def inside(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def resolve(rel: Any, *, follow: bool = True) -> str:
    """The real path of a workspace path, refused when it leaves ``/workspace``."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise AgentError("invalid_input", f"path {rel!r} must be a non-empty string", field="path")
    full = os.path.normpath(os.path.join(WORKSPACE, rel))
    if follow:
        real = os.path.realpath(full)
    else:
        real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    if not inside(real, (WORKSPACE,)):
        raise AgentError(
            "path_outside_workspace",
            f"path {rel!r} resolves to {real!r}, outside /workspace",
            path=rel,
        )
    return real


def rel_entry(path: str, st: os.stat_result) -> Json:
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    kind = "symlink" if stat.S_ISLNK(st.st_mode) else kind
    rel = os.path.relpath(path, WORKSPACE)
    return {
        "path": rel,
        "type": kind,
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": st.st_mtime,
    }


def walk(top: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``top`` (not ``top``), never following symlinks."""
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in sorted(it, key=lambda e: e.name):
                st = entry.stat(follow_symlinks=False)
                yield entry.path, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)


# ---- file operations (run as the sandbox user) ----------------------------------


def do_write(files: list[Json]) -> Json:
    for spec in files:
        path = resolve(spec.get("path"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        resolve(os.path.relpath(path, WORKSPACE))
        data = base64.b64decode(spec.get("data_b64") or "", validate=True)
        mode = int(spec.get("mode", 0o644)) & 0o777
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            write_all(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return {"written": len(files)}


def do_read(rel: str, max_bytes: int) -> Json:
    path = resolve(rel)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AgentError("invalid_input", f"path {rel!r} is not a regular file", path=rel)
        if st.st_size > max_bytes:
            raise AgentError(
                "payload_too_large",
                f"file {rel!r} has {st.st_size} bytes; the cap is {max_bytes}",
                path=rel,
                size=st.st_size,
                limit=max_bytes,
            )
        data = f.read(max_bytes + 1)[:max_bytes]
    return {"data_b64": base64.b64encode(data).decode(), "size": len(data)}


def do_list(rel: str, recursive: bool) -> Json:
    path = resolve(rel)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return {"entries": [rel_entry(path, st)]}
    entries: list[Json] = []
    items = (
        walk(path)
        if recursive
        else (
            (e.path, e.stat(follow_symlinks=False))
            for e in sorted(os.scandir(path), key=lambda e: e.name)
        )
    )
    for p, est in items:
        entries.append(rel_entry(p, est))
        if len(entries) > MAX_LIST_ENTRIES:
            raise AgentError(
                "payload_too_large", f"more than {MAX_LIST_ENTRIES} entries under {rel!r}", path=rel
            )
    return {"entries": entries}


def do_delete(rel: str, recursive: bool) -> Json:
    path = resolve(rel, follow=False)
    if path == WORKSPACE:
        raise AgentError("invalid_input", "the workspace root itself cannot be deleted", path=rel)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return {"deleted": 1}
    if not recursive:
        os.rmdir(path)
        return {"deleted": 1}
    count = 1 + sum(1 for _ in walk(path))
    shutil.rmtree(path)
    return {"deleted": count}


def check_size(size: int, what: str) -> None:
    if size > MAX_RAW_PAYLOAD:
        raise AgentError(
            "payload_too_large",
            f"{what} is over {size} bytes; the cap is {MAX_RAW_PAYLOAD}",
            size=size,
            limit=MAX_RAW_PAYLOAD,
        )


def do_tar_get(rel: str) -> Json:
    path = resolve(rel)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if not os.path.isdir(path):
            tar.add(path, arcname=os.path.basename(path), recursive=False)
        for p, _ in walk(path) if os.path.isdir(path) else ():
            tar.add(p, arcname=os.path.relpath(p, path), recursive=False)
            check_size(buf.tell(), f"the tar of {rel!r}")
    check_size(buf.tell(), f"the tar of {rel!r}")
    return {"data_b64": base64.b64encode(buf.getvalue()).decode()}


def do_tar_put(rel: str, data: bytes) -> Json:
    dest = resolve(rel)
    os.makedirs(dest, exist_ok=True)
    return {"files": extract(data, dest, (WORKSPACE,))}


# ---- safe extraction (tar_put, unpack) -------------------------------------------


def member_target(m: tarfile.TarInfo, base: str, roots: tuple[str, ...]) -> str:
    """Where a member lands, refused unless it stays inside the roots. A symlink's
    target is data (it is created, never followed), so it is not checked."""
    name = m.name
    bad = AgentError("invalid_input", f"tar member {name!r} refused: ", member=name)
    if name.startswith("/") or ".." in name.split("/") or "\0" in name:
        bad.message += "absolute path or '..'"
        raise bad
    if not (m.isreg() or m.isdir() or m.issym()):
        bad.message += "only regular files, directories and symlinks are accepted"
        raise bad
    target = os.path.normpath(os.path.join(base, name))
    if not inside(target, roots):
        bad.message += "it lands outside " + ", ".join(roots)
        raise bad
    return target


def blocker(target: str, roots: tuple[str, ...]) -> str | None:
    """The first of the root and the ancestors of ``target`` that exists and is not
    a real directory (a symlink, a file), or None. ``lstat`` only: writing below
    a symlink would write through it, wherever it points."""
    root = next(r for r in roots if inside(target, (r,)))
    rel = os.path.relpath(os.path.dirname(target), root)
    path = root
    for part in ["", *([] if rel == "." or target == root else rel.split("/"))]:
        path = os.path.join(path, part) if part else path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return path
    return None


def check_plan(plan: list[tuple[tarfile.TarInfo, str]], roots: tuple[str, ...], disk: bool) -> None:
    """Refuse a member under a symlink or file of the same tar, or (``disk``) of
    the tree it goes into, before anything is written."""
    kinds = {target: m for m, target in plan}
    for m, target in plan:
        parent = os.path.dirname(target)
        while parent not in roots and parent != "/":
            other = kinds.get(parent)
            if other is not None and not other.isdir():
                raise AgentError(
                    "invalid_input",
                    f"tar member {m.name!r} refused: it lies under {other.name!r}, not a directory",
                    member=m.name,
                )
            parent = os.path.dirname(parent)
        if disk and (found := blocker(target, roots)) is not None:
            raise AgentError(
                "invalid_input",
                f"tar member {m.name!r} refused: {found} on its way is not a directory",
                member=m.name,
            )


def extract(data: bytes, base: str, roots: tuple[str, ...], clear: bool = False) -> int:
    """Extract after checking every member first, so a bad tar changes nothing."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = tar.getmembers()
            plan = [(m, member_target(m, base, roots)) for m in members]
            check_plan(plan, roots, disk=not clear)
            if clear:
                for root in roots:
                    clear_dir(root)
            return extract_members(tar, plan, roots)
    except (tarfile.TarError, EOFError) as exc:
        raise AgentError("invalid_input", f"not a readable tar: {exc}") from None


def extract_members(
    tar: tarfile.TarFile, plan: list[tuple[tarfile.TarInfo, str]], roots: tuple[str, ...]
) -> int:
    """Write the members; no symlink is ever followed (parents are ``lstat``-ed
    again, in case an earlier member or a user process put one there)."""
    dirs: list[tuple[str, int]] = []
    count = 0
    for m, target in plan:
        if (found := blocker(target, roots)) is not None:
            raise AgentError(
                "invalid_input",
                f"tar member {m.name!r} refused: {found} on its way is not a directory",
                member=m.name,
            )
        if os.path.islink(target):
            os.unlink(target)
        if m.isdir():
            os.makedirs(target, exist_ok=True)
            dirs.append((target, m.mode & 0o777))
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
        if m.issym():
            os.symlink(m.linkname, target)
        else:
            write_member(tar, m, target)
        count += 1
    for path, mode in reversed(dirs):  # last, so read-only dirs could be filled first
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return count


def write_member(tar: tarfile.TarFile, m: tarfile.TarInfo, target: str) -> None:
    src = tar.extractfile(m)
    assert src is not None
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        shutil.copyfileobj(src, f)
        os.fchmod(fd, m.mode & 0o777)
    os.utime(target, (m.mtime, m.mtime), follow_symlinks=False)


def clear_dir(root: str) -> None:
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            for dirpath, _, _ in os.walk(entry.path):
                os.chmod(dirpath, 0o700)
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


# ---- snapshots: scan, pack, unpack ----------------------------------------------

# path -> (size, mtime_ns, ctime_ns, ino, sha256); ctime moves on any write, chmod or
# utime, so a file rewritten with its old size and mtime is read again
HASHES: dict[str, tuple[int, int, int, int, str]] = {}
Row = list[Any]  # [path, type, mode, size, sha256, target]: a manifest entry on the wire


class ScanState:
    """PID 1's memory of its last scan reply: the base of the next delta.

    It and ``HASHES`` change only in PID 1, once a scan has succeeded; the
    scanning child sees them as they were at its fork. A delta is answered only
    to the holder of ``token`` for the same ``roots``, so a worker that missed a
    reply (or another worker) gets every row instead of a diff it cannot apply.
    Every other scan walks from nothing (only the hash cache is kept), so a
    full reply never depends on the rows remembered.
    """

    def __init__(self) -> None:
        self.token: str | None = None
        self.roots: tuple[str, ...] = ()
        self.rows: dict[str, Row] = {}

    def answers(self, since: Any, roots: tuple[str, ...]) -> bool:
        """Whether a scan with ``since`` of ``roots`` gets a delta."""
        return since is not None and since == self.token and roots == self.roots

    def update(self, roots: tuple[str, ...], diff: Json, *, delta: bool) -> Json:
        """Take a ``scan_diff`` result as the new state (applied to the rows when
        ``delta``, else in their place); reply with the delta or every row."""
        if not delta:
            self.rows = {}
            HASHES.clear()
        rows = self.rows
        for path in diff["removed"]:
            del rows[path]
            HASHES.pop(path, None)
        for row, key in zip(diff["changed"], diff["keys"], strict=True):
            path = row[0]
            rows[path] = row
            if key is None:
                HASHES.pop(path, None)
            else:
                HASHES[path] = (row[3], key[0], key[1], key[2], row[4])
        since, self.token, self.roots = self.token, secrets.token_hex(8), roots
        if not delta:
            return {"token": self.token, "entries": list(rows.values())}
        return {
            "token": self.token,
            "since": since,
            "changed": diff["changed"],
            "removed": diff["removed"],
        }


SCANNED = ScanState()


def check_roots(roots: Any) -> tuple[str, ...]:
    if not isinstance(roots, list) or not roots or not all(r in ROOTS for r in roots):
        raise AgentError(
            "invalid_input", f"roots must be a non-empty subset of {list(ROOTS)}", field="roots"
        )
    return tuple(roots)


def no_follow(path: str, flags: int) -> int:
    """``open``'s opener: never through a symlink, and a fifo cannot block the open."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def open_own(path: str) -> IO[bytes]:
    """Open a file of the user for reading, even one they made unreadable or put
    in a directory they closed (both opened for the moment, then put back)."""
    try:
        return open(path, "rb", opener=no_follow)
    except PermissionError:
        with lending() as lent:
            passable(path, lent)
            mode = os.lstat(path).st_mode
            os.chmod(path, stat.S_IMODE(mode) | 0o400)
            try:
                return open(path, "rb", opener=no_follow)
            finally:
                os.chmod(path, stat.S_IMODE(mode))


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open_own(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def scan_diff(roots: tuple[str, ...], prev: dict[str, Row]) -> Json:
    """Walk ``roots`` (as the user) and compare what is there with ``prev``
    (PID 1's rows for a delta, empty for a full scan).

    Returns ``{"changed": rows new or different, "keys": [mtime_ns, ctime_ns, ino] per
    changed row (null unless a file), "removed": paths of ``prev`` gone}``, so
    only differences cross the pipe to PID 1. A file whose (size, mtime_ns,
    ctime_ns, ino) is in ``HASHES`` is not read again, and if its mode is as before its
    row is not even rebuilt. Symlinks are recorded, never followed; devices,
    fifos and sockets are skipped. Entries are those under each root, not the
    root itself.
    """
    changed: list[Row] = []
    keys: list[list[int] | None] = []
    seen: set[str] = set()
    old_row, cached, see = prev.get, HASHES.get, seen.add
    is_reg, is_dir, is_link = stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK
    with lending() as lent:
        for root in roots:
            stack = [root]
            while stack:
                for path, st in listing(stack.pop(), lent):
                    fmt = st.st_mode
                    mode = stat.S_IMODE(fmt)
                    old = old_row(path)
                    if is_reg(fmt):
                        see(path)
                        size, mtime, ino = st.st_size, st.st_mtime_ns, st.st_ino
                        ctime = st.st_ctime_ns
                        hit = cached(path)
                        if hit is not None and hit[:4] == (size, mtime, ctime, ino):
                            if old is not None and old[1] == "file" and old[2] == mode:
                                continue  # unchanged: PID 1 keeps the row it has
                            digest = hit[4]
                        else:
                            digest = sha256_of(path)
                            if not mode & 0o400:  # open_own's chmod moved ctime
                                ctime = settled_ctime(path, size, mtime, ino, ctime)
                        changed.append([path, "file", mode, size, digest, None])
                        keys.append([mtime, ctime, ino])
                        continue
                    if is_dir(fmt):
                        stack.append(path)
                        row: Row = [path, "dir", mode, 0, None, None]
                    elif is_link(fmt):
                        row = [path, "symlink", mode, 0, None, os.readlink(path)]
                    else:
                        continue
                    see(path)
                    if row != old:
                        changed.append(row)
                        keys.append(None)
    removed = [p for p in prev if p not in seen]
    return {"changed": changed, "keys": keys, "removed": removed}


@contextlib.contextmanager
def lending() -> Iterator[list[tuple[str, int]]]:
    """Directories whose modes were widened for a walk, put back after it (the
    deepest first, while those above them are still open)."""
    lent: list[tuple[str, int]] = []
    try:
        yield lent
    finally:
        for path, mode in reversed(lent):
            os.chmod(path, mode)


def listing(path: str, lent: list[tuple[str, int]]) -> list[tuple[str, os.stat_result]]:
    """Each entry of a directory with its lstat. A directory the user closed to
    themselves (no r or no x for the owner) is opened to them for the rest of
    the walk and noted in ``lent``: a snapshot must see inside it."""
    try:
        with os.scandir(path) as it:
            return [(e.path, e.stat(follow_symlinks=False)) for e in it]
    except PermissionError:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        if mode & 0o500 == 0o500:
            raise
        os.chmod(path, mode | 0o500)
        lent.append((path, mode))
        with os.scandir(path) as it:
            return [(e.path, e.stat(follow_symlinks=False)) for e in it]


def passable(path: str, lent: list[tuple[str, int]]) -> None:
    """Give the owner x on the directories under the roots on the way to
    ``path`` that lack it (noted in ``lent``), from the top down."""
    parts = path.split("/")
    for i in range(3, len(parts)):
        d = "/".join(parts[:i])
        if not inside(d, ROOTS):
            continue
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o100:
            os.chmod(d, stat.S_IMODE(st.st_mode) | 0o100)
            lent.append((d, stat.S_IMODE(st.st_mode)))


def reaching(path: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, and again through closed directories if it was refused on the way."""
    try:
        return fn()
    except PermissionError:
        with lending() as lent:
            passable(path, lent)
            return fn()


def settled_ctime(path: str, size: int, mtime: int, ino: int, ctime: int) -> int:
    """The ctime after ``open_own`` lent a file read permission and took it back:
    kept only if nothing else changed, so the next scan does not read it again."""
    st = os.lstat(path)
    same = (st.st_size, st.st_mtime_ns, st.st_ino) == (size, mtime, ino)
    return st.st_ctime_ns if same else ctime


def op_scan(req: Json) -> Json:
    roots = check_roots(req.get("roots"))
    delta = SCANNED.answers(req.get("since"), roots)
    diff = as_user(scan_diff, roots, SCANNED.rows if delta else {})
    return SCANNED.update(roots, diff, delta=delta)


def own_file(path: Any) -> str:
    """A path ``pack`` and ``read_range`` may read: absolute, normalised, under the roots."""
    if (
        not isinstance(path, str)
        or not inside(os.path.realpath(path), ROOTS)
        or path != os.path.normpath(path)
    ):
        raise AgentError("invalid_input", f"file {path!r} is not inside {list(ROOTS)}", path=path)
    return path


def do_pack(files: list[str]) -> Json:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            st = reaching(own_file(path), functools.partial(os.lstat, path))
            if not stat.S_ISREG(st.st_mode):
                raise AgentError("invalid_input", f"{path!r} is not a regular file", path=path)
            with open_own(path) as f:
                tar.addfile(tar.gettarinfo(arcname=path.lstrip("/"), fileobj=f), f)
            check_size(buf.tell(), "the packed tar")
    check_size(len(buf.getvalue()), "the packed tar")
    return {"data_b64": base64.b64encode(buf.getvalue()).decode()}


def do_unpack(data: bytes, roots: tuple[str, ...], clear: bool) -> Json:
    return {"files": extract(data, "/", roots, clear)}


def do_read_range(path: Any, offset: int, length: int) -> Json:
    """Up to ``length`` bytes of a regular file from ``offset``, and the file's
    size and mtime after the read (a change between two reads shows there)."""
    if offset < 0 or length < 0:
        raise AgentError("invalid_input", "offset and length must not be negative", field="offset")
    check_size(length, "the range asked for")
    with open_own(own_file(path)) as f:
        fd = f.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AgentError("invalid_input", f"{path!r} is not a regular file", path=path)
        parts: list[bytes] = []
        done = 0
        while done < length and (block := os.pread(fd, length - done, offset + done)):
            parts.append(block)
            done += len(block)
        st = os.fstat(fd)
    data = b"".join(parts)
    return {
        "data_b64": base64.b64encode(data).decode(),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def do_write_range(
    path: Any,
    offset: int,
    data: bytes,
    roots: tuple[str, ...],
    mode: int,
    final: bool,
    mtime: float | None,
) -> Json:
    """Write one chunk of a file below the roots. Offset 0 creates it afresh (what
    is in the way is removed, never written through); a later chunk must find
    it exactly ``offset`` bytes long; the final one sets its mode and mtime."""
    bad = AgentError("invalid_input", f"file {path!r} refused: ", path=path)
    if not isinstance(path, str) or "\0" in path or path != os.path.normpath(path):
        bad.message += "not a normalised path"
        raise bad
    if not inside(path, roots) or path in roots or offset < 0:
        bad.message += f"not below {list(roots)}, or a negative offset"
        raise bad
    if (found := blocker(path, roots)) is not None:
        bad.message += f"{found} on its way is not a directory"
        raise bad
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    if offset == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                bad.message += "a directory is in the way"
                raise bad
            os.unlink(path)
        flags |= os.O_CREAT | os.O_EXCL
    fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != offset:
            bad.message += f"it holds {st.st_size} bytes, not {offset}: a chunk out of order"
            raise bad
        view, at = memoryview(data), offset
        while view:
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done
        if final:
            os.fchmod(fd, mode & 0o777)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        return {"size": os.fstat(fd).st_size}
    except OSError as exc:  # ENOSPC above all: name the file in the error
        raise OSError(exc.errno, exc.strerror, exc.filename or path) from None
    finally:
        os.close(fd)


# ---- dispatch -------------------------------------------------------------------


def b64_field(req: Json, key: str = "data_b64") -> bytes:
    try:
        return base64.b64decode(need(req, key, str), validate=True)
    except ValueError:
        raise AgentError("invalid_input", f"field {key!r} is not valid base64", field=key) from None


OPS: dict[str, Callable[[Json], Json]] = {
    "ping": lambda r: {"pid": os.getpid(), "version": VERSION},
    "exec": op_exec,
    "write": lambda r: as_user(do_write, need(r, "files", list)),
    "read": lambda r: as_user(
        do_read, need(r, "path", str), int(r.get("max_bytes") or MAX_RAW_PAYLOAD)
    ),
    "list": lambda r: as_user(do_list, need(r, "path", str), bool(r.get("recursive"))),
    "delete": lambda r: as_user(do_delete, need(r, "path", str), bool(r.get("recursive"))),
    "tar_put": lambda r: as_user(do_tar_put, need(r, "path", str), b64_field(r)),
    "tar_get": lambda r: as_user(do_tar_get, need(r, "path", str)),
    "scan": op_scan,
    "pack": lambda r: as_user(do_pack, need(r, "files", list)),
    "unpack": lambda r: as_user(
        do_unpack, b64_field(r), check_roots(r.get("roots")), bool(r.get("clear"))
    ),
    "read_range": lambda r: as_user(
        do_read_range, r.get("path"), need(r, "offset", int), need(r, "length", int)
    ),
    "write_range": lambda r: as_user(
        do_write_range,
        r.get("path"),
        need(r, "offset", int),
        b64_field(r),
        check_roots(r.get("roots")),
        need(r, "mode", int),
        bool(r.get("final")),
        need(r, "mtime", (int, float)) if r.get("mtime") is not None else None,
    ),
}


def handle(req: Json) -> Json:
    rid = req.get("id")
    op = req.get("op")
    try:
        if op == "_too_large":
            raise AgentError("payload_too_large", f"request frame exceeds {MAX_FRAME} bytes")
        if op == "_bad":
            raise AgentError("invalid_input", "a request must be one JSON object")
        fn = OPS.get(op) if isinstance(op, str) else None
        if fn is None:
            raise AgentError("invalid_input", f"unknown op {op!r}", field="op")
        return {"id": rid, "ok": True, "result": fn(req)}
    except AgentError as exc:
        return {"id": rid, "ok": False, "error": exc.body()}
    except Exception as exc:
        log(f"op {op!r} failed: {type(exc).__name__}: {exc}")
        return {
            "id": rid,
            "ok": False,
            "error": AgentError("sandbox_error", f"{type(exc).__name__}: {exc}").body(),
        }


def limit_pids() -> None:
    """Apply ``SANDGRID_PIDS_MAX`` inside the sandbox where the cgroup is ours to set.

    Under gVisor the host pids limit counts the sentry's own threads, so the
    worker sets it with headroom and the agent sets the real limit in gVisor's
    cgroupfs; under runc the cgroupfs is read-only and the host limit applies.
    """
    want = os.environ.get("SANDGRID_PIDS_MAX", "")
    if want.isdigit():
        with contextlib.suppress(OSError), open(PIDS_MAX_FILE, "w") as f:
            f.write(want)


def main() -> int:
    limit_pids()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    os.chdir("/")
    REAPER.start()
    while True:
        try:
            req = recv()
        except (ValueError, UnicodeDecodeError):
            req = {"op": "_bad"}
        if req is None:
            return 0
        send(handle(req))


if __name__ == "__main__":
    sys.exit(main())
