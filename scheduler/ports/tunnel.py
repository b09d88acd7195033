"""A connection to a session's sandbox port, through the worker that owns the session.

The registry says who owns the session (its lease) and the owner's heartbeat
where its port listener is (``NodeRecord.ports_addr``). The API connects there,
sends the signed hello (``sandgrid.wire.portlink``) and reads the answer; on
ok the socket is the port's byte stream. Nothing names a worker beyond this
lookup, made again for every connection: a session whose owner changed (a
worker died, a restore elsewhere) is reached at its new owner, and its preview
URLs keep working. An owner that answers "not here" (the session moved between
the lookup and the connect) is asked once more after a fresh lookup.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

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

__all__ = ["TUNNEL_ATTEMPTS", "check_port", "live_session", "open_tunnel"]

#: Lookups and connects per request: one more when the owner moved meanwhile.
TUNNEL_ATTEMPTS = 2
_CLOSED = ("closed", "expired")


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


async def _read_answer(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    line = bytearray()
    while len(line) < MAX_LINE:
        b = await loop.sock_recv(sock, 1)
        if not b or b == b"\n":
            break
        line += b
    return bytes(line)


async def _connect(addr: tuple[str, int], hello: bytes, timeout: float) -> socket.socket:
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, addr)
            await loop.sock_sendall(sock, hello)
            answer = await _read_answer(loop, sock)
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
    return sock


async def open_tunnel(
    registry: SessionRegistry,
    tenant: str,
    session_id: str,
    port: int,
    *,
    key: bytes,
    timeout: float,
) -> socket.socket:
    """A connected, non-blocking socket to ``port`` on the session's loopback.

    Raises:
        NotFound: the session is unknown, another tenant's, or closed.
        PortUnreachable: nothing listens there, or the session runs nowhere.
        LimitExceeded: the session's port caps (``port_limit``).
        InfrastructureError: its worker did not answer.
    """
    last: SandgridError | None = None
    for _ in range(TUNNEL_ATTEMPTS):
        info = await run_in_threadpool(live_session, registry, tenant, session_id)
        addr = await run_in_threadpool(_owner_addr, registry, info, port)
        try:
            return await _connect(addr, Hello.make(session_id, port).line(key), timeout)
        except InfrastructureError as exc:  # moved, or the worker went: look again
            last = exc
            with contextlib.suppress(Exception):
                await asyncio.sleep(0.05)
    assert last is not None
    raise last
