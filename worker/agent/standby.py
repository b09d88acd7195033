"""A scanning child forked ahead of need: the snapshot's scan without a fork on its path.

Every turn of an ``after_turn`` session ends with a ``scan`` of the workspace,
which runs as the user in a child of the agent (``processes.as_user``). That
fork copies the agent (~28 MB): ~2-3 ms under runc, ~20 ms under gVisor, more
than the exec of ``true`` itself since commands start from the launcher host.
So, after a reply that followed a scan, PID 1 forks the child of the *next*
scan at once (``prepare``), off the turn's path: it waits, still root (so the
user can neither signal nor trace it), on a pipe. The next scan sends it the
roots, whether to diff on the rows kept, and PID 1's current token; the child
drops to the user and scans exactly as ``as_user`` would, from its own copy of
``SCANNED`` and ``HASHES`` (they change only with the token, in PID 1, so a
child whose token is PID 1's holds the same ones). A stale child (the token
moved), a dead one or none at all: the scan forks as before.

Only under gVisor (``SANDGRID_RUNTIME=runsc``, set by the worker): under runc
the fork costs ~2 ms, and made right after a reply it competes for the CPU
with the rest of the turn (the result's way back to the client), which cost a
grid turn more than the scan gained (docs/performance.md).

The child is one more task in the pids cgroup while it waits, counted out of
``tasks_besides_agent``; a deadline kill stops it (``stop``), and it is forked
again only after the next scan.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from typing import Any

from .errors import AgentError, Json
from .framing import write_all
from .processes import HELPERS, user_child
from .reaper import REAPER
from .scanstate import ScanState

__all__ = ["STANDBY", "Standby"]

_ScanFn = Callable[[tuple[str, ...], dict[str, Any]], Json]


class Standby:
    """At most one waiting scan child; single use."""

    def __init__(self) -> None:
        self.enabled = os.geteuid() == 0 and os.environ.get("SANDGRID_RUNTIME") == "runsc"
        self._wanted = False
        self._pid: int | None = None
        self._job_w = -1
        self._reply_r = -1

    def tasks(self) -> int:
        """Tasks it holds in the pids cgroup (0 or 1)."""
        return 0 if self._pid is None else 1

    def prepare(self, state: ScanState, fn: _ScanFn) -> None:
        """After a reply: fork the next scan's child, if a scan ran since the last one.

        The child will run ``fn(roots, rows)`` on its copy of ``state``."""
        if not (self.enabled and self._wanted) or self._pid is not None:
            return
        self._wanted = False
        job_r, job_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            with REAPER.cond:
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child
                    os.close(job_w)
                    os.close(reply_r)
                    _wait_for_job(job_r, reply_w, state, fn)
                REAPER.wanted.add(pid)
        except OSError:  # no pid to spare (the pids quota): scans fork as before
            for fd in (job_r, job_w, reply_r, reply_w):
                os.close(fd)
            return
        finally:
            REAPER.kick()
        os.close(job_r)
        os.close(reply_w)
        self._pid, self._job_w, self._reply_r = pid, job_w, reply_r

    def scan(self, state: ScanState, roots: tuple[str, ...], delta: bool) -> Json | None:
        """The scan of the waiting child; None when there is none or it is stale
        (``state.token`` is no longer the one it was forked with)."""
        self._wanted = True
        pid, job_w, reply_r = self._pid, self._job_w, self._reply_r
        if pid is None:
            return None
        self._pid = None
        job = {"roots": list(roots), "delta": delta, "token": state.token}
        try:
            with contextlib.suppress(OSError):  # a dead child: an empty reply below
                write_all(job_w, json.dumps(job).encode())
            os.close(job_w)
            with os.fdopen(reply_r, "rb") as f:
                raw = f.read()
        finally:
            REAPER.wait(pid, 1.0)
        if not raw:
            return None
        try:
            reply = json.loads(raw)
        except ValueError:
            raise AgentError("sandbox_error", "the scan died without an answer") from None
        if reply.get("stale"):
            return None
        if not reply["ok"]:
            raise AgentError(**reply["error"])
        result: Json = reply["result"]
        return result

    def stop(self) -> None:
        """Kill the waiting child (a deadline kill): the next scan forks."""
        pid, self._pid, self._wanted = self._pid, None, False
        if pid is None:
            return
        with REAPER.cond:  # reaped as any orphan; no status kept
            REAPER.wanted.discard(pid)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        for fd in (self._job_w, self._reply_r):
            with contextlib.suppress(OSError):
                os.close(fd)


def _wait_for_job(
    job_r: int, reply_w: int, state: ScanState, fn: _ScanFn
) -> None:  # pragma: no cover - the child
    """Wait as root for one job, then scan as the user (``user_child``).

    It keeps no descriptor of the agent's but its two pipes (and stderr): not
    the channel, not a socket."""
    token = state.token
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in (2, job_r, reply_w):
            with contextlib.suppress(OSError):
                os.close(fd)
    try:
        with os.fdopen(job_r, "rb") as f:
            raw = f.read()
        job: dict[str, Any] = json.loads(raw)
    except (OSError, ValueError):
        os._exit(0)
    if job.get("token") != token:  # PID 1's rows moved since the fork
        write_all(reply_w, b'{"stale": true}')
        os._exit(0)
    roots = tuple(job["roots"])
    user_child(reply_w, fn, (roots, state.rows if job["delta"] else {}))


STANDBY = Standby()
HELPERS.append(STANDBY)
