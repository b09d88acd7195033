"""The splice link: both directions, half-close, exact counts, cuts, the copy fallback, leaks."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from worker.agent import splice
from worker.agent.splice import Link

BIG = os.urandom(1 << 20) * 24 + b"tail"  # 24 MiB and a bit: many pipe-fulls


def pairs() -> tuple[socket.socket, socket.socket, socket.socket, socket.socket]:
    """(client, link side a) over TCP loopback, (link side b, server) over a Unix pair."""
    lst = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(lst.getsockname())
    a, _ = lst.accept()
    lst.close()
    b, server = socket.socketpair()
    return client, a, b, server


def read_all(s: socket.socket) -> bytes:
    chunks = []
    while chunk := s.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def run_link(
    count: splice.Count | None = None, pending: tuple[bytes, bytes] = (b"", b""), here: str = ""
) -> Any:
    """A link started (``start``), or run in a thread standing for the caller's
    (``run_here``: the port listener's connection thread; ``spawn``: its other
    direction on a thread the caller gives)."""
    client, a, b, server = pairs()
    done = threading.Event()
    link = Link(a, b, count, on_done=lambda _: done.set(), pending=pending)
    if here:
        spawn = _spawn if here == "spawn" else None
        threading.Thread(target=link.run_here, args=(spawn,), daemon=True).start()
    else:
        link.start()
    return client, server, link, done


def _spawn(task: Callable[[], None]) -> None:
    threading.Thread(target=task, daemon=True).start()


@pytest.fixture(params=["", "here", "spawn"], ids=["start", "run_here", "run_here_spawn"])
def here(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


def test_both_directions_with_half_close_and_exact_counts(here: str) -> None:
    counted = [0, 0]

    def count(idx: int, n: int) -> int:
        counted[idx] += n
        return n

    client, server, link, done = run_link(count, pending=(b"early", b""), here=here)

    def serve() -> bytes:
        got = read_all(server)  # ends at the client's half-close
        server.sendall(got[::-1] + BIG)  # the answer still flows after it
        server.close()
        return got

    t, out = in_thread(serve)
    client.sendall(BIG)
    client.shutdown(socket.SHUT_WR)
    answer = read_all(client)
    t.join(30)
    assert out == [b"early" + BIG]
    assert answer == (b"early" + BIG)[::-1] + BIG
    assert done.wait(10) and not link.cut and link.error is None
    assert counted == [len(BIG) + 5, 2 * len(BIG) + 5]
    client.close()


def test_half_close_from_the_server_side_keeps_the_upload_flowing(here: str) -> None:
    client, server, _, done = run_link(here=here)
    server.sendall(b"banner")
    server.shutdown(socket.SHUT_WR)
    assert read_all(client) == b"banner"  # EOF reached the client ...
    t, out = in_thread(lambda: read_all(server))
    client.sendall(BIG)  # ... and the other way still flows
    client.shutdown(socket.SHUT_WR)
    t.join(30)
    assert out == [BIG]
    server.close()
    assert done.wait(10)
    client.close()


def test_a_count_that_allows_less_cuts_after_exactly_that_much(here: str) -> None:
    total = [0]

    def count(idx: int, n: int) -> int:
        allowed = min(n, (3 << 20) - total[0])
        total[0] += allowed
        return allowed

    client, server, link, done = run_link(count, here=here)

    def send() -> None:
        with contextlib.suppress(OSError):  # the link is cut under the writer
            client.sendall(BIG)

    t, _ = in_thread(send)
    got = read_all(server)
    assert done.wait(10) and link.cut
    assert got == BIG[: 3 << 20]  # exactly up to the limit, then nothing
    t.join(30)
    client.close()
    server.close()


def test_abort_wakes_both_blocked_threads(here: str) -> None:
    client, server, link, done = run_link(here=here)
    link.abort()
    assert done.wait(10)
    assert client.recv(10) == b"" and server.recv(10) == b""
    client.close()
    server.close()


@pytest.fixture(params=["socket to pipe", "pipe to socket"])
def no_splice(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    real = os.splice

    def refusing(src: int, dst: int, count: int, *args: Any) -> int:
        into_pipe = stat.S_ISFIFO(os.fstat(dst).st_mode)
        if (request.param == "socket to pipe") == into_pipe:
            raise OSError(errno.EINVAL, "not here")
        return real(src, dst, count, *args)

    monkeypatch.setattr(os, "splice", refusing)
    yield request.param


def test_fallback_when_splice_is_refused(no_splice: str) -> None:
    counted = [0, 0]

    def count(idx: int, n: int) -> int:
        counted[idx] += n
        return n

    client, server, _, done = run_link(count)
    t, out = in_thread(lambda: read_all(server))
    client.sendall(BIG)
    client.shutdown(socket.SHUT_WR)
    t.join(30)
    assert out == [BIG]
    server.sendall(b"ok")
    server.close()
    assert read_all(client) == b"ok"
    assert done.wait(10) and counted == [len(BIG), 2]
    client.close()


def test_no_thread_or_fd_leak_over_many_links() -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    threads, before = threading.active_count(), fds()
    for i in range(60):
        client, server, _, done = run_link()
        if i % 3 == 0:  # a whole exchange
            client.sendall(b"x" * 100_000)
            client.shutdown(socket.SHUT_WR)
            assert read_all(server) == b"x" * 100_000
            server.close()
            assert read_all(client) == b""
        elif i % 3 == 1:  # the server goes away mid-way
            server.close()
            assert read_all(client) == b""
        else:  # the client resets
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            read_all(server)
        client.close()
        server.close()
        assert done.wait(10)
    assert threading.active_count() == threads
    assert fds() == before


def test_no_thread_to_be_had_ends_the_link_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    real = threading.Thread.start
    started = [0]

    def second_fails(self: threading.Thread) -> None:
        started[0] += 1
        if started[0] == 2:
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", second_fails)
    client, server, link, done = run_link()
    monkeypatch.undo()
    assert done.wait(10) and isinstance(link.error, RuntimeError)
    assert client.recv(10) == b"" and server.recv(10) == b""
    assert link.socks[0].fileno() == -1 and link.socks[1].fileno() == -1
    client.close()
    server.close()


def test_run_here_with_no_thread_to_be_had_ends_the_link_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_here`` starts one thread (b -> a), after a's pending bytes went out."""
    real = threading.Thread.start
    mine = threading.current_thread()

    def refused_here(self: threading.Thread) -> None:
        if threading.current_thread() is not mine:  # the link's own start
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", refused_here)
    client, server, link, done = run_link(pending=(b"early", b""), here="here")
    assert done.wait(10)
    monkeypatch.undo()
    assert isinstance(link.error, RuntimeError)
    assert read_all(server) == b"early" and client.recv(10) == b""
    assert link.socks[0].fileno() == -1 and link.socks[1].fileno() == -1
    client.close()
    server.close()
