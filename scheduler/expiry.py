"""Session TTLs: an idle timeout and an absolute deadline, enforced by the control plane.

Where it runs: in every API process, twice over. Lazily, on access: a turn on
a session past its TTL is refused (``TurnRunner.run`` asks ``is_due``) and a
``GET`` of one closes it there and then. And by a sweep: a daemon thread of the
API process (``Expiry.start``, from the app's lifespan) looks every
``SANDGRID_SESSION_SWEEP_S`` at the sessions that asked for a TTL (a Redis set,
``names.ttl_sessions_key``: nothing else is scanned) and closes those past it.

Closing follows the existing path (``TurnRunner.close``: the turn lock, the
registry, the ``CloseOp`` to the owner, then the stored record), then marks
``expired_at``; the API shows such a session as ``expired``. A session busy
with a turn when its time comes is closed by the next sweep after the turn.
Several API processes may sweep at once: closing is idempotent.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import redis

from sandgrid.errors import SandgridError
from sandgrid.models import SessionInfo
from sandgrid.wire import names
from sandgrid.wire.periodic import Periodic
from scheduler.tenants import Tenant

if TYPE_CHECKING:
    from scheduler.registry.sessions import SessionRegistry
    from scheduler.turns.runner import TurnRunner

__all__ = ["Expiry", "is_due", "shown"]

log = logging.getLogger(__name__)


def is_due(info: SessionInfo, now: datetime | None = None) -> bool:
    """Whether an open session is past its idle timeout or its deadline."""
    if info.state in ("closed", "expired"):
        return False
    now = now or datetime.now(UTC)
    if info.expires_at is not None and now >= info.expires_at:
        return True
    idle = info.idle_timeout_s
    return (
        idle is not None
        and info.state != "busy"
        and now - info.last_used >= timedelta(seconds=idle)
    )


def shown(info: SessionInfo) -> SessionInfo:
    """The session as the API shows it: a closed one that its TTL closed is ``expired``."""
    if info.state == "closed" and info.expired_at is not None:
        return info.model_copy(update={"state": "expired"})
    return info


class Expiry:
    """Closes sessions past their TTL (see the module doc).

    Args:
        client: the registry's Redis.
        registry: the session registry.
        runner: the turn runner (its ``close``).
        interval_s: how often the sweep runs.
    """

    def __init__(
        self,
        client: redis.Redis[str],
        registry: SessionRegistry,
        runner: TurnRunner,
        *,
        interval_s: float,
    ) -> None:
        self.redis = client
        self.registry = registry
        self.runner = runner
        self.interval_s = interval_s
        self._loop = Periodic(self.sweep, interval_s, "expiry", log)

    def track(self, info: SessionInfo) -> None:
        """Watch a new session that asked for a TTL."""
        if info.idle_timeout_s is not None or info.expires_at is not None:
            self.redis.sadd(names.ttl_sessions_key(), info.id)

    def check(self, info: SessionInfo) -> SessionInfo:
        """Close ``info`` if it is due (the lazy check of a ``GET``); as the API shows it."""
        if is_due(info):
            return self.expire(info) or info
        return shown(info)

    def expire(self, info: SessionInfo) -> SessionInfo | None:
        """Close a session past its TTL; None when a turn holds it (the next sweep retries)."""
        tenant = Tenant(name=info.tenant)
        try:
            self.runner.close(tenant, info.id)
        except SandgridError as exc:
            log.info("session %s is due but not closed yet: %s", info.id, exc)
            return None
        stamp = json.dumps(datetime.now(UTC).isoformat())
        self.redis.hset(names.session_key(info.id), "expired_at", stamp)
        self.redis.srem(names.ttl_sessions_key(), info.id)
        try:
            self.registry.close_record(info.tenant, info.id)
        except SandgridError as exc:  # re-learned closed or not: the registry says closed
            log.warning("session %s expired; its stored record not marked: %s", info.id, exc)
        log.info("session %s expired (its TTL)", info.id)
        return shown(self.registry.get(info.tenant, info.id))

    def sweep(self) -> int:
        """Close every watched session past its TTL; how many were closed."""
        closed = 0
        for session_id in sorted(self.redis.smembers(names.ttl_sessions_key())):
            info = self.registry.get_any(session_id)
            if info is None or info.state == "closed":
                self.redis.srem(names.ttl_sessions_key(), session_id)
            elif is_due(info) and self.expire(info) is not None:
                closed += 1
        return closed

    def start(self) -> None:
        """Sweep in a daemon thread until ``stop`` (a failed sweep is logged and
        tried again at the next interval: Redis down, a bug)."""
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
