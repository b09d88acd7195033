"""The dispatch loop: read each frame, run requests at once, route notifications; until EOF.

The main thread alone reads fd 0. A request gets a mailbox for its
notifications (``control.INBOX``) and runs on a request thread
(``threads.RequestThreads``), which writes its reply; a notification goes to
its request's mailbox. ``OPS`` maps each op of docs/agent-protocol.md to its
handler; file operations go through ``as_user_files`` so they run as the sandbox user.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from .background import BACKGROUND_OPS
from .control import INBOX, PTY_NOTIFY_OPS
from .egress import start_egress
from .errors import AgentError, Json, b64_field, log, need
from .exec import op_exec
from .files import (
    do_delete,
    do_list,
    do_mkdir,
    do_move,
    do_read,
    do_stat,
    do_tar_get,
    do_tar_put,
    do_write,
)
from .framing import MAX_FRAME, recv, send
from .inbound import start_inbound
from .kernel import op_run_code
from .launcher import LAUNCHER
from .limits import MAX_RAW_PAYLOAD, PIDS_MAX_FILE, VERSION, check_roots
from .memory import limit_memory
from .processes import as_user_files
from .pty import op_pty
from .reaper import REAPER
from .scan import op_scan
from .seccomp import deny_user_namespaces
from .threads import RequestThreads
from .transfer import do_pack, do_read_range, do_unpack, do_write_range

__all__ = [
    "OPS",
    "THEN_OPS",
    "WARM_EXEC",
    "handle",
    "limit_pids",
    "main",
    "op_ping",
    "serve",
    "warm_imports",
]

#: What an exec may ask to run right after its command, in the same reply:
#: the snapshot's scan, one channel round trip less per turn.
THEN_OPS = frozenset({"scan"})

#: What a warm ping runs once, so that the session's first command is not the
#: sandbox's first spawn (under gVisor that one costs ~5 ms more than the next).
WARM_EXEC: Json = {"argv": ["/bin/sh", "-c", "true"], "timeout": 10, "output_cap": 1024}


OPS: dict[str, Callable[[Json], Json]] = {
    "ping": lambda r: op_ping(r),
    "exec": op_exec,
    "run_code": op_run_code,
    "pty": op_pty,
    "write": lambda r: as_user_files(do_write, need(r, "files", list)),
    "read": lambda r: as_user_files(
        do_read, need(r, "path", str), int(r.get("max_bytes") or MAX_RAW_PAYLOAD)
    ),
    "list": lambda r: as_user_files(do_list, need(r, "path", str), bool(r.get("recursive"))),
    "stat": lambda r: as_user_files(
        do_stat, need(r, "path", str), r.get("follow", True) is not False
    ),
    "delete": lambda r: as_user_files(do_delete, need(r, "path", str), bool(r.get("recursive"))),
    "mkdir": lambda r: as_user_files(do_mkdir, need(r, "path", str)),
    "move": lambda r: as_user_files(do_move, need(r, "source", str), need(r, "destination", str)),
    "tar_put": lambda r: as_user_files(do_tar_put, need(r, "path", str), b64_field(r)),
    "tar_get": lambda r: as_user_files(do_tar_get, need(r, "path", str)),
    "scan": op_scan,
    "pack": lambda r: as_user_files(do_pack, need(r, "files", list)),
    "unpack": lambda r: as_user_files(
        do_unpack, b64_field(r), check_roots(r.get("roots")), bool(r.get("clear"))
    ),
    "read_range": lambda r: as_user_files(
        do_read_range, r.get("path"), need(r, "offset", int), need(r, "length", int)
    ),
    "write_range": lambda r: as_user_files(
        do_write_range,
        r.get("path"),
        need(r, "offset", int),
        b64_field(r),
        check_roots(r.get("roots")),
        need(r, "mode", int),
        bool(r.get("final")),
        need(r, "mtime", (int, float)) if r.get("mtime") is not None else None,
    ),
    **BACKGROUND_OPS,
}


def op_ping(req: Json) -> Json:
    """The agent's pid and protocol version. ``warm``: the sandbox is to wait in a
    pool for its session; the launcher host is started and ready before this
    reply, so that the session's first command needs no fork (launcher.py), and
    has spawned ``WARM_EXEC`` once (issue 22.3: a pool hit's first exec as fast
    as a later one)."""
    if req.get("warm") is True:
        ready = LAUNCHER.warm()
        with contextlib.suppress(AgentError):  # no workspace (a unit test): nothing to warm
            op_exec({**WARM_EXEC, "id": req.get("id")})
        return {"pid": os.getpid(), "version": VERSION, "launcher": ready}
    return {"pid": os.getpid(), "version": VERSION}


def handle(req: Json) -> Json:
    """The reply to one request: its op's result, or an error body (never an exception)."""
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
        then = req.get("then")
        if then is not None and (
            op != "exec" or not isinstance(then, dict) or then.get("op") not in THEN_OPS
        ):
            raise AgentError(
                "invalid_input", "then: only an exec may have one, and only a scan", field="then"
            )
        result = fn(req)
        if then is not None:  # the scan for the snapshot after the exec
            result["then"] = handle({**then, "id": rid})
        return {"id": rid, "ok": True, "result": result}
    except AgentError as exc:
        return {"id": rid, "ok": False, "error": exc.body()}
    except Exception as exc:
        log(f"op {op!r} failed: {type(exc).__name__}: {exc}")
        return {
            "id": rid,
            "ok": False,
            "error": AgentError("sandbox_error", f"{type(exc).__name__}: {exc}").body(),
        }


def serve(req: Json) -> None:
    """One request on its thread: run it, write its reply, close its mailbox."""
    try:
        send(handle(req))
    finally:
        INBOX.done(req.get("id"))
    LAUNCHER.prepare()  # off the exec path: the next spawn needs no fork (launcher.py)
    warm_imports()


def warm_imports() -> None:
    """Import what the agent's start left out, once a reply is sent: ``hashlib`` (a scan's,
    ~25 ms of the start under gVisor for OpenSSL) then costs the sandbox's readiness
    nothing, nor the first scan (after the first reply, a cheap lookup)."""
    import hashlib  # noqa: F401


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
    """Serve requests until EOF on fd 0 (the worker detached): the agent's exit status."""
    if not deny_user_namespaces():
        log("cannot install the seccomp filter: user namespaces are not refused")
    limit_pids()
    limit_memory()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    os.chdir("/")
    os.umask(0o022)  # what file operations create, as the user child's would (as_user_files)
    REAPER.start()
    start_egress()
    start_inbound()
    threads = RequestThreads(serve)
    while True:
        try:
            req = recv()
        except (ValueError, UnicodeDecodeError):
            req = {"op": "_bad"}
        if req is None:
            INBOX.close_all()
            threads.drain()
            return 0
        if req.get("notify") or req.get("op") in PTY_NOTIFY_OPS:
            INBOX.route(req)  # no reply, ever (docs/agent-protocol.md, notifications)
            continue
        INBOX.open(req.get("id"), str(req.get("op")))
        threads.submit(req)
