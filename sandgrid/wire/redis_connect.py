"""Redis clients and the Celery broker from one URL, plain or Sentinel (issue 22.5).

Every process reaches Redis through ``SANDGRID_REDIS_URL``. Two forms:

* ``redis://USER:PASSWORD@HOST:PORT/DB`` -- one server, as before;
* ``sentinel://USER:PASSWORD@HOST:PORT,HOST:PORT,.../DB?master=NAME`` -- the
  sentinels that watch the group ``NAME`` (default ``sandgrid``). The client asks
  them where the primary is, and asks again after a connection fails, so it
  follows a failover. The user and password are the data servers' and the
  sentinels' alike (deploy/local/sentinel.sh gives the sentinels the same ACL
  users).

Why one module: the API, the workers, Celery's broker and result backend, and
Flower (through the Celery app) must all follow the same primary. A caller that
built its own ``redis.Redis.from_url`` would keep writing to a dead (or demoted)
server after a failover, so every client is made here.

Celery takes the Sentinel form as kombu and Celery spell it
(``sentinel://H1:P1/DB;sentinel://H2:P2/DB`` and ``master_name`` in the transport
options); ``celery_broker`` writes that from ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.sentinel import Sentinel, SentinelManagedConnection

__all__ = [
    "DEFAULT_MASTER",
    "SENTINEL_SCHEME",
    "AsyncPrimaryFollowingConnection",
    "PrimaryFollowingConnection",
    "SentinelURL",
    "celery_broker",
    "connect",
    "connect_async",
    "endpoints",
    "is_sentinel",
    "parse_sentinel",
]

#: The URL scheme that names sentinels instead of a server.
SENTINEL_SCHEME = "sentinel"
#: The monitored group's name when the URL does not give ``?master=``.
DEFAULT_MASTER = "sandgrid"
_SENTINEL_PORT = 26379
#: How long a question to a sentinel may take (they answer from memory, on loopback).
_SENTINEL_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    username: str | None
    password: str | None

    def auth(self) -> dict[str, str]:
        """The credentials as redis-py keyword arguments (only those given)."""
        found = {"username": self.username, "password": self.password}
        return {k: v for k, v in found.items() if v is not None}


def is_sentinel(url: str) -> bool:
    """Whether ``url`` names sentinels (``sentinel://``) rather than one server."""
    return url.split("://", 1)[0].lower() == SENTINEL_SCHEME


def parse_sentinel(url: str) -> SentinelURL:
    """Parse ``sentinel://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...][/DB][?master=NAME]``.

    Raises:
        ValueError: not a sentinel URL, no sentinel, a port or DB that is not a
            number, or an unknown query parameter (named in the message).
    """
    if not is_sentinel(url):
        raise ValueError(f"not a {SENTINEL_SCHEME}:// URL")
    rest, _, query_text = url.split("://", 1)[1].partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    username, password = _userinfo(userinfo) if userinfo else (None, None)
    sentinels = tuple(_host_port(item) for item in hosts.split(",") if item)
    if not sentinels:
        raise ValueError("sentinel URL: no sentinel HOST:PORT")
    query = parse_qs(query_text, keep_blank_values=True)
    unknown = sorted(set(query) - {"master"})
    if unknown:
        raise ValueError(f"sentinel URL: unknown parameter {unknown[0]!r} (only 'master')")
    master = query.get("master", [DEFAULT_MASTER])[-1] or DEFAULT_MASTER
    db_text = path.strip("/") or "0"
    if not db_text.isdigit():
        raise ValueError(f"sentinel URL: the database must be a number, not {db_text!r}")
    return SentinelURL(sentinels, master, int(db_text), username, password)


def _userinfo(text: str) -> tuple[str | None, str | None]:
    user, colon, password = text.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def _host_port(item: str) -> tuple[str, int]:
    host, colon, port = item.rpartition(":") if ":" in item else (item, "", "")
    if not colon:
        return item, _SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"sentinel URL: bad port in {item!r}")
    return host.strip("[]"), int(port)


def _sentinel_kwargs(target: SentinelURL, options: dict[str, Any]) -> dict[str, Any]:
    timeouts: dict[str, Any] = {
        k: options[k] for k in ("socket_timeout", "socket_connect_timeout") if k in options
    }
    return {"socket_timeout": _SENTINEL_TIMEOUT_S, **timeouts, **target.auth()}


class PrimaryFollowingConnection(SentinelManagedConnection):
    """A connection to the primary that asks the sentinels where it is whenever it
    connects again, also on the send path.

    redis-py 8 reconnects a dropped connection inside ``send_command`` through
    ``connect_check_health``, which skips ``SentinelManagedConnection.connect`` and its
    lookup of the primary: a command retried across a failover dialled the dead
    primary until its retries ran out (a worker's turn record, 27 s, then an
    ``internal`` error; the Sentinel chaos test in CI)."""

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if getattr(self, "_sock", None) is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(  # type: ignore[misc]  # redis-py 8; the stubs are older
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )


class AsyncPrimaryFollowingConnection(AsyncSentinelManagedConnection):
    """The asyncio twin of ``PrimaryFollowingConnection`` (the same skip in
    ``send_packed_command``)."""

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        pool: Any = self.connection_pool  # a SentinelConnectionPool (the stubs say less)
        if not self.is_connected and pool.is_master:
            self.host, self.port = await pool.get_master_address()
        await super().connect_check_health(  # type: ignore[misc]  # redis-py 8; older stubs
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )


def connect(url: str, **options: Any) -> redis.Redis[str]:
    """A client (``decode_responses``) for ``url``; a Sentinel URL's follows the primary.

    Args:
        url: ``redis://...`` or ``sentinel://...`` (see the module docstring).
        options: redis-py client options (``max_connections``, ``retry``...).
    """
    options = {"decode_responses": True, **options}
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **options)
    target = parse_sentinel(url)
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, options))
    kwargs: dict[str, Any] = {"db": target.db, **target.auth(), **options}
    client: redis.Redis[str] = sentinel.master_for(
        target.master, connection_class=PrimaryFollowingConnection, **kwargs
    )
    return client


def connect_async(url: str, **options: Any) -> aioredis.Redis[str]:
    """The asyncio twin of ``connect``."""
    options = {"decode_responses": True, **options}
    if not is_sentinel(url):
        return aioredis.Redis.from_url(url, **options)
    target = parse_sentinel(url)
    sentinel = AsyncSentinel(
        list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, options)
    )
    kwargs: dict[str, Any] = {"db": target.db, **target.auth(), **options}
    client: aioredis.Redis[str] = sentinel.master_for(
        target.master, connection_class=AsyncPrimaryFollowingConnection, **kwargs
    )
    return client


def celery_broker(url: str) -> tuple[str, dict[str, Any]]:
    """The URL Celery's broker and result backend take, and their transport options.

    A plain URL is returned as it is, with no options. A Sentinel URL becomes
    kombu's ``sentinel://[AUTH@]H1:P1/DB;sentinel://H2:P2/DB`` (the credentials
    on the first, which both kombu and Celery read for the data servers) and
    ``{"master_name": ..., "sentinel_kwargs": {credentials}}``.
    """
    if not is_sentinel(url):
        return url, {}
    target = parse_sentinel(url)
    auth = ""
    if target.username is not None or target.password is not None:
        auth = quote(target.username or "", safe="")
        if target.password is not None:
            auth += ":" + quote(target.password, safe="")
        auth += "@"
    hosts = [f"{SENTINEL_SCHEME}://{h}:{p}/{target.db}" for h, p in target.sentinels]
    hosts[0] = f"{SENTINEL_SCHEME}://{auth}{hosts[0].split('://', 1)[1]}"
    options = {"master_name": target.master, "sentinel_kwargs": dict(target.auth())}
    return ";".join(hosts), options


def endpoints(url: str, *, servers: bool = False) -> list[tuple[str | None, int]]:
    """The (host, port) pairs ``url`` names: its server, or each sentinel.

    Args:
        url: ``redis://...`` or ``sentinel://...``.
        servers: with a Sentinel URL, add the data servers the sentinels know of
            now (the primary and its replicas; none when no sentinel answers), so
            that a node's guard keeps sandboxes off those ports too.
    """
    if not is_sentinel(url):
        parts = urlsplit(url)
        return [(parts.hostname, parts.port or 6379)]
    target = parse_sentinel(url)
    found: list[tuple[str | None, int]] = list(target.sentinels)
    if servers:
        found += [(h, p) for h, p in _servers(target) if (h, p) not in found]
    return found


def _servers(target: SentinelURL) -> list[tuple[str, int]]:
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, {}))
    try:
        primary = sentinel.discover_master(target.master)
        replicas = sentinel.discover_slaves(target.master)
    except redis.RedisError:
        return []
    finally:
        for client in sentinel.sentinels:
            client.close()
    return [(str(h), int(p)) for h, p in [primary, *replicas]]
