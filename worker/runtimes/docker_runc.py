"""Docker with runc: the default runtime (catalog name ``runc``).

Supports every primitive of ``Runtime`` as ``DockerRuntime`` does, with the
containers' limits held by the host's cgroups (the host limits are the quotas),
and ``host_pid``: a runc sandbox's files are the host's to read, through its top
process's ``/proc`` root (``hostfiles``).
Configuration: a Docker daemon with its default ``runc`` runtime; the client
from the environment (``DOCKER_HOST``) unless one is passed in.
"""

from __future__ import annotations

from worker.runtimes.docker import DockerRuntime

__all__ = ["DockerRunc"]


class DockerRunc(DockerRuntime):
    """Sandboxes as Docker containers under runc."""

    name = "runc"
    oci_runtime = "runc"

    def host_pid(self, sandbox_id: str) -> int | None:
        """The container's top process (the agent), whose root is the sandbox's."""
        pid = self.inspect(sandbox_id).get("pid")
        return pid if isinstance(pid, int) and pid > 0 else None
