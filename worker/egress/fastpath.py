"""The proxy's fast path: an allowed connection's bytes moved by splice threads.

Once ``Handler`` has read the request, decided, connected upstream and sent
the reply (and, for plain HTTP, the rewritten head), nothing more is parsed:
the connection leaves asyncio. Both streams stop reading, what they had
already buffered is taken, what was written is flushed, their sockets are
duplicated and the transports closed, and a ``worker.agent.splice.Link`` moves
the rest with one blocking thread per direction (zero copy through a pipe,
copying where splice is refused). Every chunk is counted before it is
forwarded, under one lock with the asyncio path's counting, so byte accounting
and the byte quota hold exactly as on the slow path.

At most ``max_links`` connections of the node take this path at once (two
threads each); the others stay on the asyncio copy. Cancelling ``pipe`` (the
sandbox closed, the proxy stopping) aborts its link and waits for its threads.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable

from worker.agent.splice import Link
from worker.egress.book import Usage

__all__ = ["MAX_LINKS", "FastPath", "add_bytes"]

#: The default cap of connections on the fast path at once, per node.
MAX_LINKS = 256
_COUNT_LOCK = threading.Lock()

_Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def add_bytes(counts: list[int], idx: int, usage: Usage, n: int, max_bytes: int) -> int:
    """Count up to ``n`` bytes of direction ``idx`` within the session's byte quota.

    Both paths count here, from the event loop or from link threads, so the
    session's shared ``usage`` is never updated by two at once.

    Returns:
        How many of the ``n`` bytes may be forwarded (and were counted): fewer
        than ``n`` means the quota is reached and the connection is cut.
    """
    with _COUNT_LOCK:
        allowed = max(0, min(n, max_bytes - usage.bytes))
        counts[idx] += allowed
        usage.bytes += allowed
        return allowed


class FastPath:
    """Hands allowed connections to splice links, at most ``max_links`` at once.

    Args:
        max_links: connections on the fast path at once (0: never).
    """

    def __init__(self, max_links: int = MAX_LINKS) -> None:
        self.max_links = max_links
        self.active = 0

    async def pipe(
        self, client: _Streams, upstream: _Streams, count: Callable[[int, int], int]
    ) -> bool | None:
        """Relay ``client`` <-> ``upstream`` until both directions end.

        Args:
            client: the sandbox's side (index 0 of ``count``: its bytes going up).
            upstream: the server's side.
            count: as ``worker.agent.splice.Count``.

        Returns:
            None when no slot was free (nothing was touched: use the slow
            path), else whether ``count`` cut the link.
        """
        if self.active >= self.max_links:
            return None
        self.active += 1
        socks: list[socket.socket] = []
        try:
            try:
                pending = (await _take(client), await _take(upstream))
                for streams in (client, upstream):
                    socks.append(await _detach(streams))
            except BaseException as exc:  # cancelled, or a side is already gone
                for sock in socks:
                    sock.close()
                if isinstance(exc, OSError):
                    return False  # so is the connection: nothing to relay
                raise
            return await _run(Link(socks[0], socks[1], count, pending=pending))
        finally:
            self.active -= 1


async def _take(streams: _Streams) -> bytes:
    """Stop reading and return what the stream had buffered."""
    reader, writer = streams
    transport = writer.transport
    assert isinstance(transport, asyncio.ReadTransport)
    transport.pause_reading()
    reader.feed_eof()
    return await reader.read()


async def _detach(streams: _Streams) -> socket.socket:
    """Flush what was written, and own a duplicate of the socket (the transport closes)."""
    writer = streams[1]
    writer.transport.set_write_buffer_limits(0)
    await writer.drain()
    raw = writer.get_extra_info("socket")
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    writer.close()
    return sock


async def _run(link: Link) -> bool:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished(_: Link) -> None:
        loop.call_soon_threadsafe(_resolve, done)

    link.on_done = finished
    link.start()
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        link.abort()
        await done
        raise
    return link.cut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
