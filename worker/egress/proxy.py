"""The node's egress proxy: an asyncio event loop in a thread of the worker process.

Each sandbox gets a directory ``<state_dir>/<node>/<container name>/`` holding
the Unix socket ``proxy.sock`` that this proxy listens on; the directory is
bind-mounted read-only at ``/run/sandgrid-egress`` in the sandbox, where the
agent forwards each connection of its loopback proxy port to the socket. The
directory is mode 0700 (root): the agent (root, no ``DAC_OVERRIDE``) reaches
it, the sandbox user does not. Which session a sandbox serves is asked at
each connection (a warm sandbox is bound to its session later), and so is
the session's policy (``Handler``). Closing a sandbox's socket also ends its
connections in flight (their attempts are recorded "closed: sandbox closed").
At most ``Limits.max_open`` connections of one sandbox are open at once,
counted from accept (before a byte is read); one more is answered 503 and
closed at once.
Configured by ``SANDGRID_WORKER__EGRESS__*``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from worker.egress.env import SOCKET_NAME
from worker.egress.handler import STREAM_LIMIT, Handler

__all__ = ["EgressProxy", "SessionOf"]

_T = TypeVar("_T")
#: Says which session a sandbox serves now (None: not bound yet).
SessionOf = Callable[[], str | None]


class EgressProxy:
    """One Unix listener per sandbox, all served by one event loop thread.

    Args:
        handler: serves each connection.
        root: this node's directory of sandbox directories (emptied at start:
            what is there belongs to a previous process of the node).
    """

    def __init__(self, handler: Handler, root: Path) -> None:
        self.handler = handler
        self.root = root
        self._servers: dict[str, asyncio.AbstractServer] = {}
        self._conns: dict[str, set[asyncio.Task[None]]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="egress", daemon=True)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        fut: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout=30)

    def directory(self, name: str) -> Path:
        """The directory of sandbox ``name`` (created, empty) to mount in the sandbox."""
        path = self.root / name
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def open(self, name: str, session_of: SessionOf) -> Path:
        """Listen on the socket of sandbox ``name``; ``session_of`` says which session
        it serves (None while it is warm: every connection is refused)."""
        path = self.directory(name) / SOCKET_NAME
        self._call(self._open(name, path, session_of))
        return path

    async def _open(self, name: str, path: Path, session_of: SessionOf) -> None:
        conns = self._conns.setdefault(name, set())

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            if len(conns) >= self.handler.limits.max_open:  # counted from accept
                await self.handler.refuse_open(session_of(), writer)
                return
            conns.add(task)
            try:
                await self.handler.serve(session_of(), reader, writer)
            finally:
                conns.discard(task)
                writer.close()

        path.unlink(missing_ok=True)
        self._servers[name] = await asyncio.start_unix_server(
            on_connect, path=str(path), limit=STREAM_LIMIT
        )
        os.chmod(path, 0o600)

    def open_connections(self, name: str) -> int:
        """Connections of sandbox ``name`` open now (a memory pause refuses them: issue 24)."""
        return len(self._conns.get(name, ()))

    def close(self, name: str, session_id: str | None = None) -> None:
        """Stop listening for sandbox ``name`` and remove its directory. Idempotent."""
        server = self._servers.pop(name, None)
        if server is not None:
            self._call(_stop(server, self._conns.pop(name, set())))
        if session_id:
            self._loop.call_soon_threadsafe(self.handler.forget, session_id)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def stop(self) -> None:
        """Close every listener and stop the loop."""
        for name in list(self._servers):
            self.close(name)
        self._call(self.handler.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


async def _stop(server: asyncio.AbstractServer, conns: set[asyncio.Task[None]]) -> None:
    server.close()
    await server.wait_closed()
    for task in conns:
        task.cancel()
    await asyncio.gather(*conns, return_exceptions=True)
