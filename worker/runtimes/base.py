"""The runtime interface: what a node needs from whatever runs its sandboxes.

A ``Runtime`` makes, connects to and removes sandboxes, and nothing else: seven
small primitives over a sandbox id. Everything that must be the same on every
runtime (validating the type and the network, labels and limits, bringing the
agent up, deadlines, state, turning replies into results) is the
runtime-neutral ``worker.sandboxes.manager.SandboxManager``, which holds one
runtime; the in-sandbox agent is reached through ``worker.agent_client`` over
the ``ByteStream`` that ``attach`` returns. docs/architecture.md, "A new
runtime", says what a new one must provide; ``tests/integration/
test_*_contract.py`` (``test_backend_contract.py`` first) is the contract every
registered runtime passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Protocol

from sandgrid.errors import SandboxError
from sandgrid.models import Quotas
from worker.runtimes.spec import HostLimits, SandboxSpec

__all__ = ["ByteStream", "Runtime"]


class ByteStream(Protocol):
    """A connected, bidirectional byte stream to the agent's stdin and stdout.

    The subset of ``socket.socket`` the agent client uses, so a plain socket
    (a vsock, a socketpair in tests) is one. Bytes only: a runtime that wraps
    them on its transport (Docker's attach headers) unwraps them first.
    ``recv`` returns ``b""`` at end of stream and raises ``TimeoutError`` when
    nothing came within the timeout; any other failure is an ``OSError``.
    """

    def settimeout(self, value: float | None, /) -> None: ...

    def sendall(self, data: bytes, /) -> None: ...

    def recv(self, bufsize: int, /) -> bytes: ...

    def shutdown(self, how: int, /) -> None: ...

    def close(self) -> None: ...

    def fileno(self) -> int:
        """The descriptor to ``poll``: readable once the agent wrote or the stream ended."""
        ...


class Runtime(ABC):
    """One way of running sandboxes (Docker with runc, Docker with gVisor, ...).

    A subclass sets ``name`` (its key in ``worker.runtimes.RUNTIMES``) and fills
    the primitives; ids are the runtime's own (a container id, a pod name).
    """

    name: ClassVar[str]
    host_pids_headroom: ClassVar[tuple[int, int]] = (1, 0)
    """(factor, extra): the host pids limit is ``pids * factor + extra``."""
    host_memory_headroom_mb: ClassVar[int] = 0
    """Added to ``memory_mb`` for the host memory limit (the runtime's own usage)."""
    can_checkpoint: ClassVar[bool] = False
    """It saves a running sandbox's memory (``checkpoint``) and creates a sandbox
    from such an image (``SandboxSpec.restore_image``): docs/memory.md."""

    def host_limits(self, quotas: Quotas) -> HostLimits:
        """The host's limits around a sandbox of ``quotas``, with this runtime's headroom."""
        factor, extra = self.host_pids_headroom
        return HostLimits(
            pids=quotas.pids * factor + extra,
            memory_mb=quotas.memory_mb + self.host_memory_headroom_mb,
        )

    def has_image(self, image: str) -> bool:
        """Whether ``image`` is where this runtime runs sandboxes (``worker.serving.ability``).

        A runtime with no images of its own (a fake) has every one.
        """
        return True

    def available(self) -> bool:
        """Whether this runtime can run sandboxes here now (its engine knows it)."""
        return True

    @abstractmethod
    def create(self, spec: SandboxSpec) -> str:
        """Create (not start) the sandbox of ``spec``; return its id.

        Its stdin must stay open for ``attach`` and close when the worker
        detaches, so that a sandbox whose worker died exits by itself.
        """

    @abstractmethod
    def attach(self, sandbox_id: str, name: str) -> ByteStream:
        """Connect to the created sandbox's agent (its stdin and stdout).

        The agent's stderr is the runtime's to log (under ``name``); it never
        enters the stream.
        """

    @abstractmethod
    def start(self, sandbox_id: str) -> None:
        """Start the attached sandbox: its agent begins to read requests."""

    @abstractmethod
    def remove(self, sandbox_id: str) -> None:
        """Kill and remove the sandbox; a missing one is not an error."""

    def kill(self, sandbox_id: str) -> bool:
        """Stop every process of the sandbox at once; return whether it did.

        The default does nothing and leaves the kill to ``remove``; a runtime
        with a faster way than its engine's own kill overrides it."""
        return False

    def host_pid(self, sandbox_id: str) -> int | None:
        """The host PID whose ``/proc/<pid>/root`` is the sandbox's own filesystem, so
        that a snapshot can read its files from the host (``hostfiles``); None when
        the host cannot see them there (the default: gVisor keeps them in its sentry)."""
        return None

    def checkpoint(self, sandbox_id: str, image_dir: Path, *, leave_running: bool = False) -> None:
        """Save the running sandbox's processes and memory into ``image_dir`` and stop it
        (``leave_running``: it goes on, as a fork's or a checkpoint's source does).

        Only a runtime with ``can_checkpoint``; the default refuses.

        Raises:
            SandboxError: this runtime cannot, or the checkpoint failed.
        """
        raise SandboxError(
            f"the {self.name} runtime cannot checkpoint a sandbox's memory",
            operation="checkpoint",
            context={"runtime": self.name},
        )

    def refused_layout(self, exc: BaseException) -> bool:
        """Whether a restore failed only because the image was saved in another
        container layout (``SandboxSpec.engine_network``), so restoring it in that
        layout may succeed. The default: never."""
        return False

    @abstractmethod
    def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """A JSON-able summary: id, name, status, running, oom_killed, labels, runtime."""

    @abstractmethod
    def list_labelled(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Summaries (id, name, status, running, labels, created) of every sandbox
        carrying all these labels, running or not."""
