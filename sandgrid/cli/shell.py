"""``sandgrid shell SESSION``: an interactive terminal on a session, in this terminal.

The local tty goes into raw mode (every key, Ctrl-C included, goes to the
remote shell), stdin is relayed to the terminal and its output to stdout,
a window resize (SIGWINCH) is sent on, and the tty is restored however the
command ends. Its exit status is the remote shell's (1 when it did not exit
by itself: closed, idle, time limit, error).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from types import FrameType

import click

from sandgrid.cli.helpers import err_console, readable_errors
from sandgrid.client import Client, Terminal

__all__ = ["raw_tty", "shell"]


@contextlib.contextmanager
def raw_tty(fd: int) -> Iterator[None]:
    """Raw mode on ``fd`` while inside (nothing when it is no tty); restored on the way out."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _relay_output(term: Terminal, done: threading.Event) -> None:
    out = sys.stdout.buffer
    try:
        while (text := term.recv()) is not None:
            out.write(text.encode())
            out.flush()
    finally:
        done.set()
        with contextlib.suppress(OSError):  # wake the input loop
            os.kill(os.getpid(), signal.SIGWINCH)


def _relay_input(term: Terminal, done: threading.Event) -> None:
    fd = sys.stdin.fileno()
    while not done.is_set():
        try:
            ready, _, _ = select.select([fd], [], [], 0.2)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if not ready:
            continue
        data = os.read(fd, 4096)
        if not data:
            return
        term.send(data.decode(errors="replace"))


def _size() -> os.terminal_size:
    """The local terminal's size: stdin's tty, else ``shutil``'s guess."""
    try:
        return os.get_terminal_size(sys.stdin.fileno())
    except (OSError, ValueError):
        return shutil.get_terminal_size()


@click.command()
@click.argument("session_id")
@click.option("--idle", "idle_s", type=float, default=None, help="close after this many idle s")
@click.option("--max-time", "max_s", type=float, default=None, help="close after this many s")
@readable_errors
def shell(session_id: str, idle_s: float | None, max_s: float | None) -> None:
    """Open an interactive shell on SESSION (exit the shell, or its ``exit``, to leave)."""
    size = _size()
    term_name = os.environ.get("TERM") or "xterm-256color"
    with Client() as client:
        term = client.pty(
            session_id,
            rows=size.lines,
            cols=size.columns,
            term=term_name,
            idle_s=idle_s,
            max_s=max_s,
        )
        done = threading.Event()

        def on_winch(_sig: int, _frame: FrameType | None) -> None:
            if not done.is_set():
                now = _size()
                with contextlib.suppress(Exception):
                    term.resize(now.lines, now.columns)

        previous = signal.signal(signal.SIGWINCH, on_winch)
        on_winch(signal.SIGWINCH, None)  # a resize before the handler was set is not lost
        reader = threading.Thread(target=_relay_output, args=(term, done), daemon=True)
        try:
            with raw_tty(sys.stdin.fileno()):
                reader.start()
                _relay_input(term, done)
                reader.join()
        finally:
            signal.signal(signal.SIGWINCH, previous)
            term.close()
    if term.reason != "exited":
        err_console.print(f"\r\nsandgrid: terminal {term.reason}: {term.state.message}".rstrip())
        sys.exit(1)
    sys.exit(term.exit_code or 0)
