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

__all__ = ["kill_top_process"]


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
    if not pid or pid <= 0 or not container_id:
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        cgroups = (proc / str(pid) / "cgroup").read_text()
        if container_id not in cgroups:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
