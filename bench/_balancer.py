"""A round-robin TCP load balancer on loopback, for several API processes (22.4).

What a real deployment puts in front of its API processes (nginx, HAProxy, a
Kubernetes Service) does the same for the grid's HTTP: each new connection goes
to the next backend. The API keeps no state of its own between requests (the
registry, idempotency keys, results and stream slots are in Redis), so any
connection may land on any process; ``bench_scale`` runs two behind this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading

__all__ = ["RoundRobin"]


class RoundRobin:
    """Listen on 127.0.0.1:``port``; hand each connection to the next of ``backends``."""

    def __init__(self, port: int, backends: list[int]) -> None:
        self.port = port
        self._next = itertools.cycle(backends)
        self.connections = dict.fromkeys(backends, 0)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> RoundRobin:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        )
        self._server = future.result(10)
        return self

    def stop(self) -> None:
        """Close the listener and every relayed connection, then the loop."""
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            future.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = next(self._next)
        self.connections[backend] += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", backend)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
