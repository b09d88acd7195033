"""A running container's host memory limit, raised in its cgroup directly.

gVisor's sandboxes are created at their memory quota and raised by the sentry's
headroom once started (``worker.runtimes.docker_runsc``). Through the Engine API
that is two ``update`` calls (the swap limit first, then the memory limit), each
a ``runsc update`` process behind containerd: ~75 ms of every cold start on
this machine. The same two values written into the container's own memory
cgroup take microseconds.

Only a cgroup that is the container's own is written: the one
``/proc/<pid>/cgroup`` names for its first process, under this process's view of
``/sys/fs/cgroup``, whose path names the container's full id and climbs
nowhere (``..``: a worker in a cgroup namespace of its own sees other paths).
Anything else (no such process here, another layout, a write refused) answers
False, and the caller goes through the Engine API as before.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CGROUP_ROOT", "raise_memory_limit"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def raise_memory_limit(
    pid: int, container_id: str, limit: int, *, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")
) -> bool:
    """Set the memory (and memory+swap) limit of the cgroup of ``pid`` to ``limit``
    bytes, if it is ``container_id``'s own; whether it was done."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return False
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    for _, controllers, path in entries:  # v1 (a hybrid host has both: v1 holds memory)
        if "memory" in controllers.split(",") and _owned(path, container_id):
            # memory+swap is never below memory, so it is raised first
            files = (("memory.memsw.limit_in_bytes", limit), ("memory.limit_in_bytes", limit))
            return _write(root / "memory" / path.lstrip("/"), files)
    for hierarchy, controllers, path in entries:  # v2 only
        if hierarchy == "0" and controllers == "" and _owned(path, container_id):
            return _write(root / path.lstrip("/"), (("memory.max", limit),))
    return False


def _owned(path: str, container_id: str) -> bool:
    return container_id in path and ".." not in path.split("/")


def _write(directory: Path, files: tuple[tuple[str, int], ...]) -> bool:
    try:
        for name, value in files:
            target = directory / name
            if name.startswith("memory.memsw") and not target.exists():
                continue  # swap accounting off: memory alone
            target.write_text(str(value))
            if int(target.read_text().strip()) != value:
                return False
    except (OSError, ValueError):
        return False
    return True
