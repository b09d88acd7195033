"""The Redis commands one grid's clients send, counted exactly (issue 22.1).

``INFO commandstats`` counts the whole server's commands, so any other client
of the shared Redis (another grid, a test run) is counted too. ``MONITOR``
shows each command with its database and its source (a client's address, or
``lua`` for a command a script ran): counted for the bench's own database, a
figure is the grid's alone, split into round trips and commands run inside
scripts. ``MONITOR`` slows Redis down, so a bench counts over turns of its own,
apart from the turns it times.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

__all__ = ["Counted", "counting"]


@dataclass
class Counted:
    """What the grid's clients sent while counting, by ``(source, command)``;
    ``source`` is ``rt`` (a round trip) or ``lua`` (run by a script)."""

    commands: Counter[tuple[str, str]] = field(default_factory=Counter)

    def per(self, n: int) -> tuple[float, float]:
        """Round trips and commands in all (scripts' included) per one of ``n``."""
        rt = sum(v for (src, _), v in self.commands.items() if src == "rt")
        return rt / n, sum(self.commands.values()) / n

    def top(self, n: int, k: int = 10) -> str:
        """The ``k`` commonest ``source:COMMAND`` per one of ``n``."""
        return ", ".join(f"{s}:{c} {v / n:.1f}" for (s, c), v in self.commands.most_common(k))


@contextlib.contextmanager
def counting(url: str) -> Iterator[Counted]:
    """Count the commands sent to ``url``'s database while inside."""
    client: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    db = int(client.connection_pool.connection_kwargs.get("db", 0))
    counted = Counted()
    stop = threading.Event()
    started = threading.Event()

    def watch() -> None:
        with client.monitor() as monitor:
            started.set()
            for cmd in monitor.listen():
                if stop.is_set():
                    return
                if cmd.get("db") != db:
                    continue
                source = "lua" if cmd.get("client_type") == "lua" else "rt"
                name = str(cmd.get("command", "")).split(" ", 1)[0].upper()
                counted.commands[(source, name)] += 1

    thread = threading.Thread(target=watch, name="redis-monitor", daemon=True)
    thread.start()
    started.wait(10)
    time.sleep(0.2)  # MONITOR is on once its reply came; leave it a moment
    try:
        yield counted
    finally:
        time.sleep(0.3)  # the last turn's trailing commands (acks, events)
        stop.set()
        with contextlib.suppress(redis.RedisError):
            client.ping()  # one more line, so the watcher sees ``stop``
        thread.join(5)
        client.close()
