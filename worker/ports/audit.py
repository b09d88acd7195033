"""Where a worker records its port connections: beside the session's egress attempts.

Each connection the API opened to a session's port, served or refused, is one
``NetworkAttempt`` (``protocol: "inbound"``, ``host: "127.0.0.1"``, the port,
``sent``: bytes from the sandbox, ``received``: bytes to it) appended to the
session's stream ``names.egress_audit_key``: ``GET /v1/sessions/{id}/network``
shows it and the control plane moves it into the tenant's audit trail as a
``network`` record (``scheduler/audit/network.py``), as it does for egress.
The bytes also go to ``names.ports_usage_key``, which the next owner reads to
hold the session's byte cap across owners. Never a payload, never a header.
"""

from __future__ import annotations

import logging

import redis as redis_lib

from sandgrid.models import NetworkAttempt
from sandgrid.wire import names

__all__ = ["PortBook"]

log = logging.getLogger(__name__)


class PortBook:
    """The port connections' audit and usage in the grid's Redis.

    Args:
        client: the node's Redis client (text).
        max_len: attempts kept per session (the egress stream's own bound).
        ttl_s: the keys expire this long after their last write.
    """

    def __init__(self, client: redis_lib.Redis[str], *, max_len: int, ttl_s: int) -> None:
        self.redis = client
        self.max_len = max_len
        self.ttl_s = ttl_s

    def used_bytes(self, session_id: str) -> int:
        """The bytes the session's port connections moved so far, on any node."""
        try:
            return int(self.redis.hget(names.ports_usage_key(session_id), "bytes") or 0)
        except (redis_lib.RedisError, ValueError):
            log.warning("session %s: port usage unreadable; counted from 0 here", session_id)
            return 0

    def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        """Append one connection to the session's audit, and its bytes to its usage."""
        audit, usage = names.egress_audit_key(session_id), names.ports_usage_key(session_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(audit, {"a": attempt.model_dump_json()}, maxlen=self.max_len, approximate=False)
        pipe.expire(audit, self.ttl_s)
        pipe.hincrby(usage, "connections", 1)
        pipe.hincrby(usage, "bytes", attempt.sent + attempt.received)
        pipe.expire(usage, self.ttl_s)
        try:
            pipe.execute()
        except redis_lib.RedisError:
            log.warning("session %s: a port connection could not be recorded", session_id)
