"""Kill a container's top process from the host, at once, by its PID.

Docker's own kill goes through the runtime: for runsc that is a request to the
sentry, which a fork bomb inside can keep busy for seconds. The container's
top process, seen from the host, is the agent under runc (PID 1 of its
namespace, whose death kills the rest) and the sentry itself under runsc
(every sandboxed process lives inside it). SIGKILL to it ends the sandbox in
one step. The PID is checked against the container's cgroup through a pidfd,
so a reused PID is never signalled.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["container_pidfd", "kill_top_process"]


def kill_top_process(pid: int | None, container_id: str, proc: Path = Path("/proc")) -> bool:
    """SIGKILL ``pid`` if it still belongs to ``container_id``.

    Args:
        pid: the container's top process as the engine reports it (``State.Pid``).
        container_id: the full container id, which its cgroup path carries.
        proc: the host's procfs (a worker that does not share the host's PID
            namespace sees other PIDs: the check then fails and nothing is sent).

    Returns:
        Whether the signal was sent; ``False`` leaves the kill to the engine.
    """
    fd = container_pidfd(pid, container_id, proc)
    if fd is None:
        return False
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def container_pidfd(pid: int | None, container_id: str, proc: Path = Path("/proc")) -> int | None:
    """A pidfd of ``pid`` when its cgroup names ``container_id`` (the caller closes it);
    None otherwise. The pidfd pins the process: while it is alive (``pidfd_send_signal``
    with 0 succeeds, or a signal is delivered through it), ``pid`` is still that
    container's process, never a recycled PID (``hostfiles`` relies on this too)."""
    if not pid or pid <= 0 or not container_id:
        return None
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        if container_id in (proc / str(pid) / "cgroup").read_text():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None
