"""One turn on the control plane, from the request to its outcome.

``runner`` (``TurnRunner``) is the flow; it gets its parts in its constructor:
``admission`` (limits, backpressure, the tenant's slot and the session's lock in
one round trip), ``routing`` (which queue), ``dispatch`` (send a ``TurnJob``,
wait for its ``TurnOutcome``; ``task_repr`` is what Flower shows of it),
``watch`` (whom a waiting turn depends on), ``recovery`` (what becomes of a
turn whose worker was lost or whose deadline passed), ``idempotency`` (an
exec's key) and ``cancel``. ``processes`` and ``terminal`` send the turns of
background processes and terminals through the same flow.
"""

from __future__ import annotations

__all__: list[str] = []
