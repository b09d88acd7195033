"""The SDK's terminal: ``Session.pty()`` and ``AsyncSession.pty()`` over a WebSocket.

A pure part (``TerminalState``: what a server frame means) shared by two thin
shells over the ``websockets`` package: ``Terminal`` on its sync client,
``AsyncTerminal`` on its asyncio client. ``recv`` returns output text, or
``None`` once the terminal has ended (then ``exit_code`` and ``reason`` say
how); an error the server reports (bad token, unknown or busy session, a bad
message) is raised as the same ``SandgridError`` subclass the API raises.

The token travels in the ``Authorization`` header, never in the URL (the API
refuses ``?token=``); the socket also offers the subprotocol ``sandgrid.v1``,
which the server answers.

``websockets`` is imported when a terminal opens, so ``import sandgrid`` does
not need it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypedDict
from urllib.parse import urlencode

from sandgrid.client._requests import check_keywords
from sandgrid.client._shell import AsyncClosing, Closing
from sandgrid.errors import SandgridError, error_from_body
from sandgrid.terminal import (
    PTY_DEFAULT_COLS,
    PTY_DEFAULT_ROWS,
    SUBPROTOCOL,
    resize_message,
    stdin_message,
)

__all__ = [
    "OPEN_TIMEOUT_S",
    "AsyncTerminal",
    "Terminal",
    "TerminalOptions",
    "TerminalState",
    "pty_url",
    "terminal_url",
]

OPEN_TIMEOUT_S = 30.0


class TerminalOptions(TypedDict, total=False):
    """The keywords of ``pty`` (client and session, sync and async).

    Attributes:
        rows: the terminal's height; 24 by default.
        cols: its width; 80 by default.
        term: its ``TERM``; ``xterm-256color`` by default.
        idle_s: it ends after this long without input or output (the grid's default
            when None).
        max_s: it ends after this long in all (the grid's default when None).
    """

    rows: int
    cols: int
    term: str
    idle_s: float | None
    max_s: float | None


def pty_url(base_url: str, session_id: str, params: dict[str, Any]) -> str:
    """The ``ws://`` (or ``wss://``) URL of a session's terminal."""
    scheme, _, rest = base_url.partition("://")
    ws = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{ws}://{rest}/v1/sessions/{session_id}/pty" + (f"?{query}" if query else "")


def terminal_url(base_url: str, session_id: str, options: TerminalOptions) -> str:
    """The URL of a session's terminal opened with ``options`` (their defaults filled)."""
    check_keywords("pty", options, TerminalOptions)
    params = {
        "rows": options.get("rows", PTY_DEFAULT_ROWS),
        "cols": options.get("cols", PTY_DEFAULT_COLS),
        "term": options.get("term", "xterm-256color"),
        "idle_s": options.get("idle_s"),
        "max_s": options.get("max_s"),
    }
    return pty_url(base_url, session_id, params)


def _websockets_missing() -> SandgridError:
    return SandgridError(
        "the terminal needs the 'websockets' package: pip install 'websockets>=13'",
        operation="pty",
    )


class TerminalState:
    """What the server's frames mean; the end of the terminal once it came."""

    def __init__(self) -> None:
        self.exit_code: int | None = None
        self.reason: str | None = None
        self.message = ""

    @property
    def ended(self) -> bool:
        return self.reason is not None

    def feed(self, raw: str | bytes) -> str | None:
        """Output text of one frame ("" for none); None at the exit frame.

        Raises:
            SandgridError: the server reported an error (its own subclass).
        """
        msg = json.loads(raw)
        kind = msg.get("type")
        if kind == "stdout":
            return str(msg.get("data", ""))
        if kind == "exit":
            self.exit_code, self.reason = msg.get("code"), str(msg.get("reason", "exited"))
            self.message = str(msg.get("message", ""))
            return None
        if kind == "error":
            raise error_from_body(msg)
        return ""

    def hung_up(self) -> None:
        """The socket closed without an exit frame."""
        if self.reason is None:
            self.reason = "disconnected"

    @contextmanager
    def hang_up_on(self, closed: type[Exception]) -> Iterator[None]:
        """Take the socket's ``closed`` error inside as its hang-up (``hung_up``)."""
        try:
            yield
        except closed:
            self.hung_up()


class _Common:
    state: TerminalState

    @property
    def exit_code(self) -> int | None:
        """The shell's exit status once it exited (None before, or when it was killed)."""
        return self.state.exit_code

    @property
    def reason(self) -> str | None:
        """Why the terminal ended: exited, closed, idle, max_time, error, disconnected."""
        return self.state.reason


class Terminal(_Common, Closing):
    """A terminal on a session (sync). Use as a context manager, or ``close()`` it."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        try:
            from websockets.sync.client import connect
            from websockets.typing import Subprotocol
        except ImportError:  # pragma: no cover - an install without it
            raise _websockets_missing() from None
        self.state = TerminalState()
        self._ws = connect(
            url,
            additional_headers=headers,
            subprotocols=[Subprotocol(SUBPROTOCOL)],
            open_timeout=OPEN_TIMEOUT_S,
        )

    def send(self, data: str) -> None:
        """Type ``data`` (``"\\r"`` is Enter)."""
        self._ws.send(stdin_message(data))

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size (the shell gets SIGWINCH)."""
        self._ws.send(resize_message(rows, cols))

    def recv(self, timeout: float | None = None) -> str | None:
        """The next output text; None once the terminal has ended.

        Raises:
            TimeoutError: nothing came within ``timeout`` seconds.
            SandgridError: the server reported an error.
        """
        from websockets.exceptions import ConnectionClosed

        while not self.state.ended:
            with self.state.hang_up_on(ConnectionClosed):
                if text := self.state.feed(self._ws.recv(timeout=timeout)):
                    return text
        return None

    def read_until(self, needle: str, timeout: float) -> str:
        """Output until ``needle`` appears in it (or the terminal ends); all of it.

        Raises:
            TimeoutError: ``needle`` did not appear within ``timeout`` seconds.
        """
        import time

        seen, end = "", time.monotonic() + timeout
        while needle not in seen:
            text = self.recv(timeout=max(end - time.monotonic(), 0.001))
            if text is None:
                break
            seen += text
        return seen

    def close(self) -> None:
        """Hang up: the shell and everything it started are killed."""
        self._ws.close()


class AsyncTerminal(_Common, AsyncClosing):
    """A terminal on a session (asyncio): ``await AsyncSession.pty()``."""

    def __init__(self, ws: Any) -> None:
        self.state = TerminalState()
        self._ws = ws

    @classmethod
    async def open(cls, url: str, headers: dict[str, str]) -> AsyncTerminal:
        """Connect (the server sends the turn when the socket opens)."""
        try:
            from websockets.asyncio.client import connect
            from websockets.typing import Subprotocol
        except ImportError:  # pragma: no cover
            raise _websockets_missing() from None
        ws = await connect(
            url,
            additional_headers=headers,
            subprotocols=[Subprotocol(SUBPROTOCOL)],
            open_timeout=OPEN_TIMEOUT_S,
        )
        return cls(ws)

    async def send(self, data: str) -> None:
        """Type ``data``."""
        await self._ws.send(stdin_message(data))

    async def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size."""
        await self._ws.send(resize_message(rows, cols))

    async def recv(self, timeout: float | None = None) -> str | None:
        """The next output text; None once the terminal has ended."""
        import asyncio

        from websockets.exceptions import ConnectionClosed

        while not self.state.ended:
            with self.state.hang_up_on(ConnectionClosed):
                if text := self.state.feed(await asyncio.wait_for(self._ws.recv(), timeout)):
                    return text
        return None

    async def close(self) -> None:
        """Hang up."""
        await self._ws.close()
