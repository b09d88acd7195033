"""A connection to a session's sandbox port, through the worker that owns the session.

The registry says who owns the session (its lease) and the owner's heartbeat
where its port listener is (``NodeRecord.ports_addr``). The API connects there,
sends the signed hello (``sandgrid.wire.portlink``) and reads the answer; on
ok the socket is the port's byte stream. ``open_stream`` sends the caller's
first bytes (an HTTP request's head) with the hello and returns what of the
port's answer came with the worker's; a WebSocket or CDP sends none and takes
the socket alone (``bare``: the caller speaks after the answer). Nothing names a worker beyond this
lookup, made again for every connection: a session whose owner changed (a
worker died, a restore elsewhere) is reached at its new owner, and its preview
URLs keep working. An owner that answers "not here" (the session moved between
the lookup and the connect) is asked once more after a fresh lookup.

The lookup's answer is kept ``OWNER_CACHE_S`` per tenant and session, so a
page's burst of requests costs one: the worker is the authority on whether it
serves the session (a closed or moved session is gone from its table and it
answers "not here"), and that answer drops the entry, so a stale one costs a
retry, never a request to the wrong session. The session's preview-URL
epochs (``SessionInfo.port_url_epochs``) come with the same read and are kept
with the address, so that a preview's revocation check (``admit``) costs no
round trip of its own: it holds on the API that revoked from its next lookup
(``forget``; a lookup it overtook serves its own request and is not kept), and
at most ``OWNER_CACHE_S`` late on another API process.

A session that runs nowhere now (idle-released, paused, or its worker died) is
woken by the caller's ``wake`` (a turn of the session, which brings it back on
whichever node takes it, its memory image with it when it was paused with
memory) and looked up again, once: a preview URL of a paused session works.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from sandgrid.errors import (
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    NotFound,
    PortUnreachable,
    SandgridError,
)
from sandgrid.models import SessionInfo
from sandgrid.ops.ports import MAX_PORT, MIN_PORT
from sandgrid.wire.portlink import MAX_LINE, Hello, parse_answer
from scheduler.registry.sessions import SessionRegistry

__all__ = [
    "OWNER_CACHE_S",
    "TUNNEL_ATTEMPTS",
    "Admit",
    "Owner",
    "Wake",
    "bare",
    "check_port",
    "forget",
    "live_session",
    "open_stream",
]

#: Brings a session that runs nowhere back into a sandbox (a turn of it).
Wake = Callable[[], Awaitable[None]]
#: Refuses the connection from the session's preview-URL epochs (raises), before the
#: sandbox is touched or woken.
Admit = Callable[[Mapping[str, int]], None]


@dataclass(frozen=True)
class Owner:
    """Where the session's owner listens for ports, and the session's URL epochs."""

    addr: tuple[str, int]
    url_epochs: Mapping[str, int]


#: Lookups and connects per request: one more when the owner moved meanwhile.
TUNNEL_ATTEMPTS = 2
_CLOSED = ("closed", "expired")
#: How long a session's owner address is reused without a lookup (see the module doc).
OWNER_CACHE_S = 2.0
_CACHE_MAX = 4096
_owners: dict[tuple[str, str], tuple[Owner, float]] = {}
#: ``forget`` calls so far: a lookup that a ``forget`` overtook is used once, not kept.
_forgets = [0]
_waking: dict[tuple[str, str], asyncio.Future[None]] = {}


def _cached(tenant: str, session_id: str) -> Owner | None:
    hit = _owners.get((tenant, session_id))
    if hit is None or hit[1] < time.monotonic():
        return None
    return hit[0]


def _remember(tenant: str, session_id: str, owner: Owner) -> None:
    if len(_owners) >= _CACHE_MAX:
        _owners.clear()
    _owners[(tenant, session_id)] = (owner, time.monotonic() + OWNER_CACHE_S)


def forget(tenant: str, session_id: str) -> None:
    """Drop what this process keeps of the session (its URL epochs changed)."""
    _forgets[0] += 1
    _owners.pop((tenant, session_id), None)


def check_port(port: int, reserved: frozenset[int]) -> None:
    """A port the route may forward to.

    Raises:
        InvalidInput: outside 1-65535, or the sandbox agent's own (egress) port.
    """
    if not MIN_PORT <= port <= MAX_PORT:
        raise InvalidInput(
            f"port {port} is outside {MIN_PORT}-{MAX_PORT}",
            operation="ports",
            context={"field": "port", "rule": f"{MIN_PORT} <= port <= {MAX_PORT}"},
        )
    if port in reserved:
        raise InvalidInput(
            f"port {port} is reserved: the sandbox agent's own",
            operation="ports",
            context={"field": "port", "rule": "not a port the sandbox type reserves"},
        )


def live_session(registry: SessionRegistry, tenant: str, session_id: str) -> SessionInfo:
    """The tenant's open session (a closed one is as unknown as another tenant's).

    Raises:
        NotFound: unknown, another tenant's, closed or expired.
    """
    info = registry.get(tenant, session_id)
    if info.state in _CLOSED:
        raise NotFound(
            f"session {session_id!r} is closed",
            code=ErrorCode.NOT_FOUND,
            operation="ports",
            context={"session": session_id, "state": info.state},
        )
    return info


def _lookup(
    registry: SessionRegistry, tenant: str, session_id: str, port: int, admit: Admit | None
) -> Owner:
    """The session (open, the tenant's, admitted) and its owner's port listener, in one
    thread hop."""
    info = live_session(registry, tenant, session_id)
    if admit is not None:
        admit(info.port_url_epochs)
    return Owner(_owner_addr(registry, info, port), dict(info.port_url_epochs))


def _owner_addr(registry: SessionRegistry, info: SessionInfo, port: int) -> tuple[str, int]:
    if not info.owner:
        raise PortUnreachable(
            f"session {info.id} is not running in a sandbox now (idle or paused): nothing "
            f"listens on port {port}; a turn brings the sandbox back",
            operation="ports",
            context={"port": port, "reason": "session_not_running"},
        )
    record = registry.ledger.node_record(info.owner)
    if record is None or not record.ports_addr:
        raise InfrastructureError(
            f"the worker holding session {info.id} is gone or serves no ports",
            code=ErrorCode.WORKER_LOST,
            operation="ports",
            context={"port": port, "retry_after": 2.0},
            retryable=True,
        )
    host, _, p = record.ports_addr.rpartition(":")
    return host.strip("[]"), int(p)


async def _read_answer(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> tuple[bytes, bytes]:
    """The worker's answer line, and the port's first bytes when they came in the same
    read (a request sent with the hello may be answered right behind the ok)."""
    buf = bytearray()
    while b"\n" not in buf and len(buf) < MAX_LINE:
        chunk = await loop.sock_recv(sock, MAX_LINE)
        if not chunk:
            break
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    return line, rest


async def _connect(
    addr: tuple[str, int], hello: bytes, timeout: float
) -> tuple[socket.socket, bytes]:
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, addr)
            await loop.sock_sendall(sock, hello)
            answer, first = await _read_answer(loop, sock)
    except (OSError, TimeoutError) as exc:
        sock.close()
        raise InfrastructureError(
            f"the session's worker did not answer on its port listener: {exc!r}",
            code=ErrorCode.WORKER_LOST,
            operation="ports",
            context={"retry_after": 2.0},
            retryable=True,
        ) from exc
    error = parse_answer(answer)
    if error is not None:
        sock.close()
        raise error
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, first


def bare(opened: tuple[socket.socket, bytes]) -> socket.socket:
    """The socket of ``open_stream`` called without early bytes (a WebSocket, CDP).

    Raises:
        SandgridError: the port spoke before the caller (not a server the API speaks to).
    """
    sock, first = opened
    if first:
        sock.close()
        raise SandgridError("the worker's port listener answered garbage", operation="ports")
    return sock


async def open_stream(
    registry: SessionRegistry,
    tenant: str,
    session_id: str,
    port: int,
    *,
    key: bytes,
    timeout: float,
    wake: Wake | None = None,
    admit: Admit | None = None,
    early: bytes = b"",
) -> tuple[socket.socket, bytes]:
    """A connected, non-blocking socket to ``port`` on the session's loopback, ``early``
    sent on it, and the port's bytes that came with the worker's answer.

    ``early`` is sent again on a retry (a fresh connection): it must be bytes in hand,
    never a stream's.

    ``admit`` (a preview URL's revocation check) sees the session's URL epochs
    of the lookup, or of the cached one, before anything is connected or woken.

    Raises:
        Forbidden: what ``admit`` raises.
        NotFound: the session is unknown, another tenant's, or closed.
        PortUnreachable: nothing listens there, or the session runs nowhere
            (after ``wake``, when given, brought it back).
        LimitExceeded: the session's port caps (``port_limit``).
        InfrastructureError: its worker did not answer.
    """
    last: SandgridError | None = None
    attempts = TUNNEL_ATTEMPTS
    while attempts > 0:
        attempts -= 1
        try:
            owner = _cached(tenant, session_id)
            if owner is None:
                forgets = _forgets[0]
                owner = await run_in_threadpool(_lookup, registry, tenant, session_id, port, admit)
                if forgets == _forgets[0]:
                    _remember(tenant, session_id, owner)
            elif admit is not None:
                admit(owner.url_epochs)
            hello = Hello.make(session_id, port).line(key)
            return await _connect(owner.addr, hello + early, timeout)
        except (InfrastructureError, PortUnreachable) as exc:
            if not _asleep(exc) or (wake is None and isinstance(exc, PortUnreachable)):
                raise
            _owners.pop((tenant, session_id), None)
            last = exc
            if wake is not None and attempts == 0:  # once, after the plain retry
                await _wake_once((tenant, session_id), wake)
                wake, attempts = None, 1
            else:
                with contextlib.suppress(Exception):
                    await asyncio.sleep(0.05)
    assert last is not None
    raise last


async def _wake_once(key: tuple[str, str], wake: Wake) -> None:
    """``wake``, or the wake of the same session already under way (a page's burst of
    requests to a sleeping session makes one turn, not one each)."""
    running = _waking.get(key)
    if running is None:
        running = asyncio.ensure_future(wake())
        _waking[key] = running
        running.add_done_callback(lambda _: _waking.pop(key, None))
    await asyncio.shield(running)


def _asleep(exc: SandgridError) -> bool:
    """Whether ``exc`` says the session runs nowhere now (a turn would bring it back)."""
    if isinstance(exc, PortUnreachable):
        return exc.context.get("reason") == "session_not_running"
    return True  # the owner is gone, or it no longer holds the session
