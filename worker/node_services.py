"""The node's services made from settings: the egress proxy, the port listener,
the catalog's view and the turns' control channel (``worker.node`` wires them)."""

from __future__ import annotations

import redis

from sandgrid.wire import catalog, redis_connect
from sandgrid.wire.catalog import CatalogView
from sandgrid.wire.portkeys import port_key
from sandgrid.wire.settings import Settings
from worker.egress import EgressProxy, RedisBook, Resolver
from worker.egress.handler import Handler
from worker.egress.hostguard import HostGuard
from worker.egress.limits import Limits
from worker.ports.audit import PortBook
from worker.ports.caps import PortCaps
from worker.ports.server import PortServer
from worker.ports.sockets import InboundSockets
from worker.sessions.table import SessionTable
from worker.turns.interactive import TurnControl

__all__ = ["catalog_view", "egress_proxy", "port_server", "turn_control"]


def egress_proxy(name: str, settings: Settings) -> EgressProxy:
    """The node's egress proxy over the grid's Redis (docs/network.md)."""
    egress = settings.worker.egress
    book = RedisBook(settings.redis_url, max_len=egress.audit_max, ttl_s=egress.audit_ttl_s)
    handler = Handler(
        book,
        Resolver(egress.hosts),
        name,
        egress.connect_timeout_s,
        guard=HostGuard.from_settings(settings),
        limits=Limits.from_settings(egress),
    )
    return EgressProxy(handler, egress.state_dir / name)


def port_server(
    name: str, settings: Settings, sessions: SessionTable, inbound: InboundSockets | None
) -> PortServer | None:
    """The node's port listener over its sandboxes' agents (docs/ports.md); None without them."""
    if inbound is None:
        return None
    p, egress = settings.ports, settings.worker.egress
    book = PortBook(_redis(settings), max_len=egress.audit_max, ttl_s=egress.audit_ttl_s)
    return PortServer(
        name,
        port_key(settings, "link"),
        sessions,
        inbound,
        PortCaps(p.max_connections, p.max_bytes, book.used_bytes),
        book,
        reserved=frozenset({egress.port}),
        timeout_s=p.connect_timeout_s,
    )


def catalog_view(settings: Settings) -> CatalogView:
    """The registry's catalog, made this process's view of the types (25.1)."""
    from sandgrid.wire.objects import open_objects
    from sandgrid.wire.type_store import TypeStore

    store = TypeStore(_redis(settings), open_objects(settings))
    view = CatalogView(store, cache_s=settings.types_poll_s)
    catalog.install(view)
    return view


def turn_control(settings: Settings, sessions: SessionTable) -> TurnControl:
    """Streamed output and cancel of the node's running execs, on a Redis client whose
    timeouts keep a Redis outage from holding a turn."""
    return TurnControl(_redis(settings), sessions)


def _redis(settings: Settings) -> redis.Redis[str]:
    """A client of the grid's Redis whose timeouts keep an outage from holding the caller."""
    return redis_connect.connect(
        settings.redis_url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2
    )
