"""The sandgrid SDK, sync and async.

    from sandgrid.client import Client

    with Client(token="sg_...") as client, client.session(type="python") as s:
        print(s.exec(shell="echo hi").stdout)

Errors are the grid's own ``sandgrid.errors`` classes, re-raised from the API's
error bodies. Imports only httpx, pydantic and the contract modules.
"""

from __future__ import annotations

from sandgrid.client._async import (
    AsyncBackgroundProcess,
    AsyncClient,
    AsyncSession,
    AsyncSessionOpener,
)
from sandgrid.client._pty import AsyncTerminal, Terminal
from sandgrid.client._retry import RetryPolicy
from sandgrid.client._stream import AsyncTurnStream, TurnStream
from sandgrid.client._sync import BackgroundProcess, Client, Session

__all__ = [
    "AsyncBackgroundProcess",
    "AsyncClient",
    "AsyncSession",
    "AsyncSessionOpener",
    "AsyncTerminal",
    "AsyncTurnStream",
    "BackgroundProcess",
    "Client",
    "RetryPolicy",
    "Session",
    "Terminal",
    "TurnStream",
]
