"""A node's sessions and the sandboxes waiting for them.

``table`` is the session table (which local sandbox serves which session, one
table per node); ``pool`` the warm pools of ready sandboxes per type, from
which a session's first turn on this node takes its sandbox. The heartbeat
(lease renewal) and the reaper (idle sessions, orphans) act on both.
"""

from __future__ import annotations

__all__: list[str] = []
