"""The commands sent to the test database while inside ``recorded`` (MONITOR).

What a unit test of a command budget needs (issue 22.1): each command as
``(source, NAME, args)``, ``source`` ``rt`` for a round trip's command and
``lua`` for one a script ran, in the order Redis ran them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import redis

__all__ = ["Command", "names_of", "recorded"]

Command = tuple[str, str, str]


def names_of(commands: list[Command], source: str | None = None) -> list[str]:
    """The commands' names, of ``source`` only when given."""
    return [name for src, name, _ in commands if source is None or src == source]


@contextlib.contextmanager
def recorded(url: str) -> Iterator[list[Command]]:
    """Record the commands that reach ``url``'s database until the block ends."""
    client: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    db = int(client.connection_pool.connection_kwargs.get("db", 0))
    seen: list[Command] = []
    stop, started = threading.Event(), threading.Event()

    def watch() -> None:
        with client.monitor() as monitor:
            started.set()
            for cmd in monitor.listen():
                if stop.is_set():
                    return
                if cmd.get("db") != db:
                    continue
                name, _, args = str(cmd.get("command", "")).partition(" ")
                source = "lua" if cmd.get("client_type") == "lua" else "rt"
                seen.append((source, name.upper(), args))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    started.wait(10)
    time.sleep(0.1)
    try:
        yield seen
    finally:
        time.sleep(0.1)
        stop.set()
        with contextlib.suppress(redis.RedisError):
            client.ping()
        thread.join(5)
        client.close()
