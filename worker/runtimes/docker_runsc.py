"""Docker with gVisor ``runsc``: the same containers under a user-space kernel.

The runtime of catalog name ``runsc``. Supports everything ``DockerRunc``
does, with the same quotas and hardening (``docs/decisions.md``, "How do
quotas hold the same on gVisor?").
Configuration: ``runsc`` must be registered with the Docker daemon as the
runtime named ``runsc`` (``deploy/local/docker.sh`` does it, with
``--network=none``). runsc ignores Docker's seccomp profile; user namespaces
are refused by the agent's own filter (``worker/agent/seccomp.py``).

What differs, and who holds each limit:

- memory: the sentry reports as total memory the host cgroup's limit when the
  sandbox starts, so the container is created at exactly ``memory_mb`` (the
  program's ``/proc/meminfo`` and cgroup show the quota), then the host limit
  is raised by ``sentry_memory_headroom_mb`` for the sentry's own memory. The
  agent holds the quota inside (``worker/agent/memory.py``): past it, it kills
  the user's biggest process and counts an OOM kill, as the kernel does under
  runc; the host limit, never reached by the user's pages, only keeps the
  sentry alive.
- pids: enforced inside by the agent in gVisor's cgroupfs, the host limit being
  only a ceiling with headroom for the sentry (``host_pids_headroom``).

Memory snapshots (issue 24, docs/memory.md): ``checkpoint`` runs ``runsc
checkpoint`` against Docker's own runsc state root (the daemon's API cannot
without its experimental mode, and would copy the image through containerd's
content store); a spec with ``restore_image`` is created under the daemon's
``runsc-restore`` runtime (``deploy/local/runsc-restore``), whose ``create``
is ``runsc restore`` of that image, so the restored sandbox is a Docker
container like any other, its agent on the new container's attached stdio.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import ClassVar

from sandgrid.errors import SandboxError
from sandgrid.wire.settings import get_settings
from worker.runtimes.cgroup_memory import raise_memory_limit
from worker.runtimes.docker import DockerRuntime, container_kwargs
from worker.runtimes.spec import SandboxSpec

__all__ = ["RESTORE_BACKGROUND_ENV", "RESTORE_ENV", "DockerRunsc"]

RESTORE_ENV = "SANDGRID_RESTORE_IMAGE"
"""In a container's environment: the image its ``runsc-restore`` create restores.
The restored processes keep the environment they were saved with; only the
runtime wrapper reads it."""
RESTORE_BACKGROUND_ENV = "SANDGRID_RESTORE_BACKGROUND"
"""``1``: the wrapper restores with ``--background`` (24.4): the sandbox runs while its
pages are still loading from the image, instead of after."""

_MIB = 1 << 20
_LAYOUT_REFUSED = '"Mounts" does not match across checkpoint restore'


class DockerRunsc(DockerRuntime):
    """Sandboxes as Docker containers under gVisor ``runsc``."""

    name = "runsc"
    oci_runtime = "runsc"
    host_pids_headroom = (32, 1024)
    """The sentry and its systrap stubs live in the host pids cgroup: a fork bomb
    capped there would crash the sandbox instead of failing ``fork`` inside it.
    The agent enforces ``quotas.pids`` in gVisor's own cgroupfs instead."""
    host_memory_headroom_mb = 0
    """Created at the quota: runsc passes the host limit to the sentry as its
    total memory (``--total-memory``), which is what the program sees."""
    sentry_memory_headroom_mb: ClassVar[int] = 512
    """Added to the host limit once the sandbox runs. The sentry's own memory
    (page tables, systrap stubs) is charged to the host memory cgroup; at its
    limit the host OOM killer picks the sentry and the whole sandbox dies. With
    the headroom, the agent's guard kills the user's process first."""

    can_checkpoint = True

    def create(self, spec: SandboxSpec) -> str:
        if spec.restore_image is None:
            return super().create(spec)
        memory = get_settings().worker.memory
        args = container_kwargs(spec, oci_runtime=memory.restore_runtime)
        args["environment"][RESTORE_ENV] = str(spec.restore_image)
        if memory.restore_background:  # the wrapper adds --background (24.4)
            args["environment"][RESTORE_BACKGROUND_ENV] = "1"
        host_config = self.client.api.create_host_config(**args.pop("host_config"))
        reply = self.client.api.create_container(**args, host_config=host_config)
        return str(reply["Id"])

    def refused_layout(self, exc: BaseException) -> bool:
        """runsc found the container's mounts other than the image's."""
        return _LAYOUT_REFUSED in str(exc)

    def start(self, sandbox_id: str) -> None:
        super().start(sandbox_id)
        self._raise_host_memory(sandbox_id)

    def checkpoint(self, sandbox_id: str, image_dir: Path, *, leave_running: bool = False) -> None:
        """``runsc checkpoint`` of the running sandbox into ``image_dir``; it stops after
        unless ``leave_running`` (a fork's or a checkpoint's source, 24.2/24.3).

        Raises:
            SandboxError: runsc failed or took longer than the settings allow
                (its words, which name the cause: an open host socket, say).
        """
        memory = get_settings().worker.memory
        full_id = str(self.client.api.inspect_container(sandbox_id)["Id"])
        command = [str(memory.runsc_path), "--root", str(memory.runsc_root), "checkpoint"]
        command += ["--leave-running"] if leave_running else []
        command += ["--exclude-committed-zero-pages"] if memory.exclude_zero_pages else []
        command += ["--image-path", str(image_dir), full_id]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=memory.checkpoint_timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(
                f"runsc checkpoint of {sandbox_id[:12]} failed: {exc}",
                operation="checkpoint",
                context={"runtime": self.name},
            ) from exc
        if done.returncode != 0:
            words = done.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxError(
                f"runsc checkpoint of {sandbox_id[:12]} failed: {words[-1] if words else '?'}",
                operation="checkpoint",
                context={"runtime": self.name, "exit": done.returncode},
            )

    def _raise_host_memory(self, container_id: str) -> None:
        """Add the sentry's headroom to the host memory limit of a started sandbox.

        In its memory cgroup directly where this process can (``cgroup_memory``:
        microseconds), else through the Engine API: the swap limit first (runsc
        writes the memory limit before the swap limit, and the kernel refuses a
        memory limit above the current swap limit), two ``runsc update`` calls.
        """
        api = self.client.api
        info = api.inspect_container(container_id)
        quota = int(info["HostConfig"]["Memory"])
        limit = quota + self.sentry_memory_headroom_mb * _MIB
        if raise_memory_limit(int(info["State"]["Pid"] or 0), str(info["Id"]), limit):
            return
        api.update_container(container_id, mem_limit=quota, memswap_limit=limit)
        api.update_container(container_id, mem_limit=limit, memswap_limit=limit)
