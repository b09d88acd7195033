"""A turn on this node, from the Celery task to its outcome.

``entry.run_turn`` is the entry of every turn (the batch gate, one-turn
sessions), ``executor.Executor`` runs it (claim, lease, sandbox, the op's
handler from ``worker.ops``, snapshot, record), ``snapshot_policy`` decides when a
workspace is saved, ``residency`` how a session leaves the node, ``interactive``
streams and cancels execs, ``ran`` answers a re-sent attempt.

Nothing is imported here: the op handlers import ``residency`` and
``snapshot_policy``, and the executor imports the handlers.
"""

from __future__ import annotations

__all__: list[str] = []
