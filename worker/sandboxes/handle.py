"""The handle of one sandbox: what the node knows of it, and its agent client.

A ``Sandbox``'s life: ``warm`` (created, answering) -> ``leased`` (serving its
one session) -> ``released`` -> ``destroyed``; ``error`` if it failed to
start, ``lost`` when its channel broke. Nothing but ``warm`` and ``leased``
sandboxes accept work (``USABLE``). The handle holds the sandbox's
``AgentClient`` (``channel``) and the scan state of its snapshots; the
``SandboxManager`` of its runtime acts on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from sandgrid.models import Quotas
from worker.agent.scanstate import ScanState
from worker.agent_client.client import AgentClient

__all__ = ["USABLE", "Sandbox", "SandboxState"]

SandboxState = Literal["warm", "leased", "released", "destroyed", "error", "lost"]
USABLE: tuple[SandboxState, ...] = ("warm", "leased")


@dataclass(eq=False)
class Sandbox:
    """The handle of one sandbox (a plain dataclass, never on a wire)."""

    id: str
    name: str
    sandbox_type: str
    runtime: str
    quotas: Quotas
    labels: dict[str, str]
    state: SandboxState = "warm"
    created_at: float = field(default_factory=time.time)
    session_id: str | None = None
    tenant: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    channel: AgentClient | None = field(default=None, repr=False)
    """The sandbox's agent client, from its bring-up until it is destroyed."""
    lineage: tuple[str, ...] = ()
    """The containers whose processes this one carries on, oldest first (restored from
    a memory image: issue 24): a background process's handle naming one of them still
    reaches its process here."""
    host_pid: int | None = None
    """The host PID through whose ``/proc`` root the host reads the sandbox's files
    (runc's top process; 0: the host cannot; None: not asked of the runtime yet)."""
    scan_state: ScanState | None = field(default=None, repr=False)
    """The last scan, for the next one's delta; None means the next scan is full."""
    scan_after_exec: tuple[str, ...] | None = field(default=None, repr=False)
    """Roots the next exec scans right after its command, in the same request (the
    snapshot after the turn then needs no round trip of its own)."""
    scan_ready: ScanState | None = field(default=None, repr=False)
    """That scan, until the next request: ``scan`` of the same roots answers with it."""
    scan_inline: dict[str, bytes] = field(default_factory=dict, repr=False)
    """The small files the last scan read, as it read them (``inline``), until the
    snapshot after it takes them instead of a ``pack`` (``AgentFiles.inlined``)."""
