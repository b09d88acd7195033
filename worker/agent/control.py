"""Notification frames: requests the worker sends without waiting for a reply.

Requests run at once, each on a request thread (``requests``), while the main
loop alone reads fd 0. A notification for a request in flight (a ``cancel`` of
an exec, a terminal's ``pty_input``) is posted to that request's ``Mailbox``:
the op waiting on it (an exec's pump, a terminal's loop) watches the mailbox's
wake-up fd in its selector beside its pipes. A notification names its request
by ``target`` (the request's frame id); a terminal notification without one
goes to the newest terminal in flight. One whose request has already answered
is handled by ``notify``, where a late ``cancel`` is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .errors import Json, log

__all__ = ["INBOX", "NOTIFY", "PTY_NOTIFY_OPS", "Control", "Inbox", "Mailbox", "notify"]

#: The notifications of a terminal: its input, a resize, its close.
PTY_NOTIFY_OPS = ("pty_input", "pty_resize", "pty_close")


class Control:
    """What the notifications read during one exec asked of it.

    Args:
        rid: the id of the exec request in flight (a cancel must name it).
    """

    def __init__(self, rid: Any) -> None:
        self.rid = rid
        self.cancelled = False
        self.eof = False

    def on_frame(self, req: Json | None) -> None:
        """One notification for this exec; ``None`` is EOF (the worker detached)."""
        if req is None:
            self.eof = True
        elif req.get("op") == "cancel" and req.get("target") == self.rid:
            self.cancelled = True
        else:
            notify(req)


class Mailbox:
    """The notifications of one request in flight, with a fd that wakes a selector.

    Args:
        op: the request's op (a terminal's mailbox takes untargeted pty frames).
    """

    def __init__(self, op: str) -> None:
        self.op = op
        self._frames: deque[Json | None] = deque()
        self._lock = threading.Lock()
        self._fds: tuple[int, int] | None = None  # made when an op first waits on it

    def fileno(self) -> int:
        """Readable while a notification (or EOF, ``None``) waits to be taken.

        The pipe is made on the first call: most requests (files, scans) never
        wait for a notification and need none.
        """
        with self._lock:
            if self._fds is None:
                rfd, wfd = os.pipe()
                os.set_blocking(rfd, False)
                os.set_blocking(wfd, False)
                self._fds = (rfd, wfd)
                if self._frames:
                    self._wake()
            return self._fds[0]

    def post(self, frame: Json | None) -> None:
        with self._lock:
            self._frames.append(frame)
            self._wake()

    def take(self) -> list[Json | None]:
        """Every notification posted so far, oldest first."""
        with self._lock:
            if self._fds is not None:
                with contextlib.suppress(BlockingIOError, OSError):
                    os.read(self._fds[0], 4096)
            frames = list(self._frames)
            self._frames.clear()
            return frames

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, None
        for fd in fds or ():
            with contextlib.suppress(OSError):
                os.close(fd)

    def _wake(self) -> None:
        if self._fds is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._fds[1], b"x")


class Inbox:
    """The mailboxes of the requests in flight, by frame id; routes notifications."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boxes: dict[Any, Mailbox] = {}
        self.eof = False

    def open(self, rid: Any, op: str) -> Mailbox:
        """A mailbox for request ``rid``, opened by the loop before the request runs,
        so that a notification right behind it finds it."""
        box = Mailbox(op)
        with self._lock:
            self._boxes[rid] = box
        if self.eof:
            box.post(None)
        return box

    def get(self, rid: Any) -> Mailbox | None:
        with self._lock:
            return self._boxes.get(rid)

    def done(self, rid: Any) -> None:
        with self._lock:
            box = self._boxes.pop(rid, None)
        if box is not None:
            box.close()

    def route(self, frame: Json) -> None:
        """Post a notification to its request's mailbox, else handle it here."""
        target = frame.get("target")
        with self._lock:
            box = self._boxes.get(target) if target is not None else None
            if box is None and target is None and frame.get("op") in PTY_NOTIFY_OPS:
                terms = [b for b in self._boxes.values() if b.op == "pty"]
                box = terms[-1] if terms else None
        if box is not None:
            box.post(frame)
        elif frame.get("op") not in PTY_NOTIFY_OPS:  # a terminal's, after it ended: dropped
            notify(frame)

    def close_all(self) -> None:
        """EOF on fd 0: every request in flight is told (``None``)."""
        self.eof = True
        with self._lock:
            boxes = list(self._boxes.values())
        for box in boxes:
            box.post(None)


INBOX = Inbox()


def _late_cancel(req: Json) -> None:
    """A cancel of a request that has already answered: nothing left to kill."""


#: Handlers of notification ops outside a request, by op (none replies).
NOTIFY: dict[str, Callable[[Json], None]] = {"cancel": _late_cancel}


def notify(req: Json) -> None:
    """Handle one notification frame; an unknown op is logged, never answered."""
    fn = NOTIFY.get(str(req.get("op")))
    if fn is None:
        log(f"notification {req.get('op')!r} ignored")
        return
    fn(req)
