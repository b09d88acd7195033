"""A node's sandboxes: their handles and the runtime-neutral manager over a runtime.

``handle`` is ``Sandbox`` (one sandbox's state, its agent client, its scan
state); ``manager`` is ``SandboxManager``, the algorithm every runtime shares
(create from a spec, bring up, call the agent, deadlines, destroy) over one
``worker.runtimes.Runtime``; ``files`` is ``AgentFiles``, the snapshot
operations over the agent (``SandboxFiles``), composed into the manager, with
``scan`` the worker's half of the incremental scan. No engine SDK is imported
here: the runtimes import theirs when they are made.
"""

from __future__ import annotations

from worker.sandboxes.handle import Sandbox, SandboxState
from worker.sandboxes.manager import SandboxManager

__all__ = ["Sandbox", "SandboxManager", "SandboxState"]
