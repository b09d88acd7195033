"""open_stream wakes a session that runs nowhere, once, and only that (issue 21.1).

The registry and the worker's listener are faked here (the lookup and the
connect); tests/integration/test_ports_grid.py holds the same on the real grid.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InfrastructureError, PortUnreachable
from scheduler.ports import tunnel


def _asleep() -> PortUnreachable:
    return PortUnreachable("runs nowhere", context={"reason": "session_not_running"})


def _not_listening() -> PortUnreachable:
    return PortUnreachable("nothing listens", context={"port": 8000})


class Fake:
    """A lookup that fails until ``awake``, and a connect that answers a socket."""

    def __init__(self, asleep: Exception, after_wake: Exception | None = None) -> None:
        self.asleep, self.after_wake = asleep, after_wake
        self.awake = False
        self.wakes = 0

    def lookup(
        self, registry: Any, tenant: str, session_id: str, port: int, admit: Any
    ) -> tunnel.Owner:
        if not self.awake:
            raise self.asleep
        if self.after_wake is not None:
            raise self.after_wake
        return tunnel.Owner(("127.0.0.1", 1), {})

    async def wake(self) -> None:
        self.wakes += 1
        await asyncio.sleep(0.01)
        self.awake = True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Fake:
    found = Fake(_asleep())
    monkeypatch.setattr(tunnel, "_lookup", lambda *a: found.lookup(*a))

    async def connect(
        addr: tuple[str, int], hello: bytes, timeout: float
    ) -> tuple[socket.socket, bytes]:
        return socket.socket(), b""

    monkeypatch.setattr(tunnel, "_connect", connect)
    tunnel._owners.clear()
    return found


async def _open(fake: Fake, session: str = "s-1", wake: bool = True) -> socket.socket:
    opened = await tunnel.open_stream(
        None,  # type: ignore[arg-type]
        "t",
        session,
        8000,
        key=b"k",
        timeout=1.0,
        wake=fake.wake if wake else None,
    )
    return tunnel.bare(opened)


def test_a_sleeping_session_is_woken_once_then_reached(fake: Fake) -> None:
    sock = asyncio.run(_open(fake))
    sock.close()
    assert fake.wakes == 1


def test_a_burst_to_a_sleeping_session_makes_one_wake(fake: Fake) -> None:
    async def burst() -> list[socket.socket]:
        return list(await asyncio.gather(*(_open(fake) for _ in range(8))))

    for sock in asyncio.run(burst()):
        sock.close()
    assert fake.wakes == 1


def test_without_wake_a_sleeping_session_is_502_at_once(fake: Fake) -> None:
    with pytest.raises(PortUnreachable) as err:
        asyncio.run(_open(fake, wake=False))
    assert err.value.context["reason"] == "session_not_running" and fake.wakes == 0


def test_a_lost_owner_wakes_and_a_server_not_listening_does_not(fake: Fake) -> None:
    fake.asleep = InfrastructureError("gone", code=ErrorCode.WORKER_LOST)
    fake.after_wake = _not_listening()
    with pytest.raises(PortUnreachable) as err:
        asyncio.run(_open(fake))
    assert "reason" not in err.value.context and fake.wakes == 1  # woken, then a clear 502


def test_not_listening_is_never_a_wake(fake: Fake) -> None:
    fake.asleep = _not_listening()
    with pytest.raises(PortUnreachable):
        asyncio.run(_open(fake))
    assert fake.wakes == 0


def test_a_lookup_overtaken_by_a_forget_is_not_kept(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revocation (``forget``) between a lookup's read and its answer: that request
    uses what it read, the next one reads again."""
    fake.awake = True
    lookups: list[str] = []

    def lookup(*args: Any) -> tunnel.Owner:
        lookups.append(args[2])
        if len(lookups) == 1:
            tunnel.forget("t", "s-1")
        return tunnel.Owner(("127.0.0.1", 1), {})

    monkeypatch.setattr(tunnel, "_lookup", lookup)
    for _ in range(3):
        asyncio.run(_open(fake)).close()
    assert lookups == ["s-1", "s-1"]  # the second is kept for the third
