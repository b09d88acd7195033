"""Exposed ports on the worker (issue 21.1, docs/ports.md).

``sockets`` holds the agents' dialed connections (a Unix listener per
sandbox), ``server`` is the listener the API connects to, ``caps`` counts a
session's connections and bytes, ``audit`` records each connection where the
egress attempts go.
"""

from __future__ import annotations

__all__: list[str] = []  # import the modules themselves (the sandbox manager needs only sockets)
