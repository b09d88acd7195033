"""The node's op handlers by kind: how the executor finds the handler of a turn's op.

Like Celery's ``TaskRegistry``, a handler is found by name (the op's ``kind``),
not by an ``isinstance`` chain: each family module lists its handlers in its
``HANDLERS``, and ``OPS`` holds every family's. Adding an op to a family is
one entry in that family's ``HANDLERS``; a new family is one module and one
line here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sandgrid.errors import SandgridError
from worker.ops import code, exec, files, lifecycle, processes, session, terminal
from worker.ops.base import Handler

__all__ = ["OPS", "OpRegistry"]


class OpRegistry:
    """A map of op kind to its handler.

    Args:
        handlers: the handlers; two of one kind are refused.

    Raises:
        ValueError: two handlers of one kind.
    """

    def __init__(self, handlers: Iterable[Handler] = ()) -> None:
        self._handlers: dict[str, Handler] = {}
        for handler in handlers:
            self.register(handler)

    def register(self, handler: Handler) -> None:
        """Add ``handler`` under its op's kind.

        Raises:
            ValueError: a handler of that kind is registered already.
        """
        if handler.kind in self._handlers:
            raise ValueError(f"a handler of op kind {handler.kind!r} is registered already")
        self._handlers[handler.kind] = handler

    def handler(self, kind: str) -> Handler:
        """The handler of op kind ``kind``.

        Raises:
            SandgridError: no handler of that kind (an op this node does not know).
        """
        try:
            return self._handlers[kind]
        except KeyError:
            raise SandgridError(f"unknown op {kind!r}", operation=kind) from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)


OPS = OpRegistry(
    [
        *exec.HANDLERS,
        *files.HANDLERS,
        *processes.HANDLERS,
        *code.HANDLERS,
        *lifecycle.HANDLERS,
        *session.HANDLERS,
        *terminal.HANDLERS,
    ]
)
"""Every op this node runs."""
