"""What the node's components need of a warm pool, apart from the pool itself.

``WarmPool`` (``worker.sessions.pool``) is the real one; the reaper, the
executor and the residency checks see only ``SandboxPool``, and the ops that
start sandboxes of their own take a ``BackendFor``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sandgrid.models import Quotas
from worker.sandboxes import Sandbox, SandboxManager

__all__ = ["BackendFor", "SandboxPool"]

#: The backend that runs a sandbox type (the node maps types to runtimes once).
BackendFor = Callable[[str], SandboxManager]


class SandboxPool(Protocol):
    """What the node's components need of a pool (``WarmPool`` is the real one)."""

    def start(self) -> None: ...

    def close(self) -> None: ...

    def acquire(
        self, sandbox_type: str, quotas: Quotas | None = None, *, session_id: str, tenant: str
    ) -> Sandbox: ...

    def discard(self, sbx: Sandbox) -> None: ...

    def container_ids(self) -> set[str]: ...

    def prune(self, gone: set[str]) -> int: ...
