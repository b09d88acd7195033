"""What a runtime is asked to make: one sandbox, described without naming an engine.

``SandboxSpec`` is built by the runtime-neutral side (``worker.quotas.sandbox_spec``
from the session's quotas, the sandbox type and the node) and handed to
``Runtime.create``; each runtime turns it into its own terms (Docker's
``create_container`` arguments in ``worker.runtimes.docker``, a pod manifest, a
microVM's config). Plain frozen dataclasses, never on a wire.

What every runtime gives the agent, whatever the spec: it runs as root (PID 1)
with only ``AGENT_CAPS``: ``SETUID``, ``SETGID`` (to start user commands and
file operations as ``SANDBOX_UID``/``SANDBOX_GID`` 1000 with no supplementary
groups) and ``KILL`` (to signal the user's processes at a deadline). No
``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``: the agent cannot even read the user's
private files, it forks and drops to uid 1000 for file operations. The
workspace (``/workspace``), the home (``/home/sandbox``, both owned by the
sandbox user) and ``/tmp`` are writable, of the quotas' sizes; the rest of the
root filesystem is read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandgrid.models import Quotas

__all__ = ["AGENT_CAPS", "SANDBOX_GID", "SANDBOX_UID", "HostLimits", "Mount", "SandboxSpec"]

SANDBOX_UID = 1000
SANDBOX_GID = 1000
AGENT_CAPS = ("SETUID", "SETGID", "KILL")


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox (the agent zipapp, the egress socket dir)."""

    target: str
    """Where the sandbox sees it."""
    source: Path
    """The path on the host (as the engine's host resolves it)."""
    read_only: bool = True


@dataclass(frozen=True)
class HostLimits:
    """The limits the host enforces around the sandbox, which may exceed the quotas.

    Under runc they are the quotas; under gVisor the sentry's own threads and
    memory count there too, so the runtime asks for headroom
    (``Runtime.host_limits``) and the agent holds the quotas inside.
    """

    pids: int
    memory_mb: int


@dataclass(frozen=True)
class SandboxSpec:
    """One sandbox to create.

    Attributes:
        name: unique on the node (``sandgrid-<type>-<hex>``).
        image: the root filesystem (its PID 1 is the agent, ``command``).
        runtime: the runtime's name (``worker.runtimes.RUNTIMES``).
        command: the agent's command line (``worker.quotas.AGENT_COMMAND``).
        quotas: the sandbox's limits: cpus, memory, pids, tmpfs sizes, ulimits.
        labels: ``worker.quotas.sandbox_labels``: how the reaper finds its own.
        environment: the agent's environment (its inner limits, the proxy).
        mounts: host paths the sandbox needs, read-only.
        network: the network to join; None: no network at all (loopback only).
        host: the host's limits around the sandbox.
        restore_image: a memory image (a directory on the host) the sandbox is
            restored from instead of booted (issue 24; only a runtime whose
            ``can_checkpoint`` is set accepts one).
        hosts: an ``/etc/hosts`` of loopback names on the host, mounted where the
            runtime gives a sandbox with no network none of its own (Docker
            with its networking off: ``worker.runtimes.hosts``).
        engine_network: with no network, let the engine set up its own empty
            one anyway (its hook, its ``/etc/hosts`` and ``/etc/resolv.conf``):
            the layout of sandboxes made before the engine's networking was
            turned off, which a memory image saved then restores only into.
    """

    name: str
    image: str
    runtime: str
    command: tuple[str, ...]
    quotas: Quotas
    labels: Mapping[str, str]
    environment: Mapping[str, str]
    mounts: tuple[Mount, ...]
    network: str | None
    host: HostLimits
    restore_image: Path | None = None
    hosts: Path | None = None
    engine_network: bool = False
