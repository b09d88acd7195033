"""Docker with gVisor ``runsc``: the same containers under a user-space kernel.

Supports everything ``DockerBackend`` does. Configuration: ``runsc`` must be
registered with the Docker daemon as the runtime named ``runsc``
(``deploy/`` does it, with ``--network=none``). Differences the agent handles:
the memory cgroup files are not visible inside gVisor, so an OOM kill is
inferred from a SIGKILL the agent did not send (``docs/agent-protocol.md``);
and the pids limit is enforced inside the sandbox by the agent, the host limit
being only a ceiling with headroom for the sentry (see ``host_pids_headroom``).
"""

from __future__ import annotations

from worker.backends.docker import DockerBackend

__all__ = ["GVisorBackend"]


class GVisorBackend(DockerBackend):
    """Sandboxes as Docker containers under gVisor ``runsc``."""

    runtime = "runsc"
    host_pids_headroom = (32, 1024)
    """The sentry and its systrap stubs live in the host pids cgroup: a fork bomb
    capped there would crash the sandbox instead of failing ``fork`` inside it.
    The agent enforces ``quotas.pids`` in gVisor's own cgroupfs instead."""
    host_memory_headroom_mb = 512
    """The sentry's own memory (page tables, systrap stubs) is charged to the
    host memory cgroup; at the limit the host OOM killer picks the sentry, the
    biggest process there, and the sandbox dies. The headroom keeps the user's
    allocations the first to hit gVisor's limit, whose OOM kill takes only the
    user's process."""
