"""What an op handler is, and what it is given: the two handler kinds and their context.

A handler is a function of one op kind, found by that kind in the registry
(``worker.ops.registry``). Its type says whether it needs the session's
sandbox:

- a ``SandboxHandler`` (exec, files, code, pty, proc_start) runs in the
  session's sandbox: the executor brings the session here first (a lease, a
  warm sandbox, the snapshot restored), runs the handler under the session's
  lock, and snapshots after it as the session's policy says;
- a ``NodeHandler`` (close, fork, the lifecycle ops, the quick process ops)
  runs on the node without bringing the sandbox here: it works on the snapshot
  store, the ledger, or a sandbox that is here already.

Either gets one small context: the turn (node, job, hence the session and the
turn id), the node's parts it may use (``NodeParts``) and, for a sandbox op,
the sandbox and its backend. It returns the op's typed result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from sandgrid.models import SessionInfo
from sandgrid.ops.terminal import PtyOp, PtyResult
from sandgrid.wire.jobs import TurnJob, TurnResult
from sandgrid.wire.ledger import SessionLedger
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool_protocol import BackendFor
from worker.sessions.table import SessionTable
from worker.turns.interactive import TurnControl
from worker.turns.residency import Residency
from worker.turns.snapshot_policy import Persistence

__all__ = [
    "Handler",
    "NodeHandler",
    "NodeParts",
    "SandboxContext",
    "SandboxHandler",
    "Terminals",
    "TurnContext",
]

OpT = TypeVar("OpT", bound=BaseModel)


class Terminals(Protocol):
    """Serves terminal turns (``worker.ops.terminal.TerminalBridge``)."""

    def run(self, backend: SandboxManager, sbx: Sandbox, op: PtyOp) -> PtyResult: ...


@dataclass(frozen=True)
class NodeParts:
    """The node's parts a handler may use, built once by the node.

    Attributes:
        ledger: the session ledger (records, checkpoints' latest snapshot).
        sessions: the node's session table (a resident sandbox, if any).
        residency: how a session leaves the node.
        persistence: the snapshot policy and store (fork, forget, save).
        backend_for: the backend of a sandbox type.
        control: streams and cancels execs by turn id; None runs them plain.
        terminal: serves terminal turns; None refuses them.
    """

    ledger: SessionLedger
    sessions: SessionTable
    residency: Residency
    persistence: Persistence
    backend_for: BackendFor
    control: TurnControl | None = None
    terminal: Terminals | None = None


@dataclass(frozen=True)
class TurnContext:
    """What every handler gets: the node, the turn, the node's parts.

    Attributes:
        node: the node's name (results name it).
        job: the turn (its session record, its id).
        parts: the node's parts.
    """

    node: str
    job: TurnJob
    parts: NodeParts

    @property
    def session(self) -> SessionInfo:
        """The session's record, as the scheduler sent it."""
        return self.job.session

    @property
    def turn_id(self) -> str:
        return self.job.turn_id


@dataclass(frozen=True)
class SandboxContext(TurnContext):
    """A sandbox op's context: the turn's, with the session's sandbox and its backend."""

    backend: SandboxManager
    sandbox: Sandbox


@dataclass(frozen=True)
class _Registered(Generic[OpT]):
    """A handler's op: its request model, whose ``kind`` is the registry's key."""

    op: type[OpT]

    @property
    def kind(self) -> str:
        return str(self.op.model_fields["kind"].default)


@dataclass(frozen=True)
class SandboxHandler(_Registered[OpT]):
    """An op that runs in the session's sandbox: the executor brings the session
    here, and ``run`` gets the sandbox and its backend in its context. An op that
    ``mutates`` the workspace marks it changed before it runs, and the snapshot
    after it (the session's policy permitting) must succeed for its result to say
    ``saved``."""

    run: Callable[[SandboxContext, OpT], TurnResult]
    mutates: bool = False


@dataclass(frozen=True)
class NodeHandler(_Registered[OpT]):
    """An op that runs on the node without the session's sandbox (``run`` may use
    one that is here already, through the session table)."""

    run: Callable[[TurnContext, OpT], TurnResult]


Handler = SandboxHandler[Any] | NodeHandler[Any]
