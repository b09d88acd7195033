"""Notification frames: requests the worker sends without waiting for a reply.

The agent answers one request at a time, so a control message for the request
in flight (``cancel``) cannot wait its turn: while an exec pumps, fd 0 is in the
exec's selector and each frame read there goes to ``Control.on_frame``. A frame
with ``"notify": true`` never gets a reply; one that arrives between requests
(the exec it named has already answered) is handled by ``notify`` in the main
loop, where a late ``cancel`` is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import Json, log

__all__ = ["NOTIFY", "Control", "notify"]


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
        """One frame read from fd 0 mid-exec; ``None`` is EOF (the worker detached)."""
        if req is None:
            self.eof = True
        elif req.get("op") == "cancel" and req.get("target") == self.rid:
            self.cancelled = True
        else:
            notify(req)


def _late_cancel(req: Json) -> None:
    """A cancel of a request that has already answered: nothing left to kill."""


#: Handlers of notification ops outside an exec, by op (none replies).
NOTIFY: dict[str, Callable[[Json], None]] = {"cancel": _late_cancel}


def notify(req: Json) -> None:
    """Handle one notification frame; an unknown op is logged, never answered."""
    fn = NOTIFY.get(str(req.get("op")))
    if fn is None:
        log(f"notification {req.get('op')!r} ignored")
        return
    fn(req)
