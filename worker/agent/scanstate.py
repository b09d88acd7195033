"""The state of the incremental scan, as both ends of the channel hold it.

A ``scan`` reply carries a ``token``; the next scan of the same roots may send
it back as ``since`` and get only the rows changed and the paths removed since
(docs/agent-protocol.md). The agent keeps its last reply here (the base of the
next delta it computes), the worker keeps the rows of the replies it received
(``worker.sandboxes.scan.apply_reply``); one class, so the two cannot disagree
on what a delta means. Pure and stdlib-only: the worker imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["ScanRow", "ScanState"]

ScanRow = tuple[str, str, int, int, str | None, str | None]
"""One manifest entry of ``scan``: (path, type, mode, size, sha256, target)."""


class ScanState:
    """One scan reply as its holder keeps it: the base of the next delta.

    Attributes:
        token: names the reply (None before the first one).
        roots: the roots it covers; a delta is only for the same roots.
        rows: its rows by path.
        ordered: ``rows`` sorted by path, where the holder keeps them so (the
            worker, which hands them on in order); reused until a delta
            changes something.
    """

    __slots__ = ("ordered", "roots", "rows", "token")

    def __init__(
        self,
        token: str | None = None,
        roots: tuple[str, ...] = (),
        rows: dict[str, ScanRow] | None = None,
        ordered: list[ScanRow] | None = None,
    ) -> None:
        self.token = token
        self.roots = roots
        self.rows: dict[str, ScanRow] = {} if rows is None else rows
        self.ordered: list[ScanRow] = [] if ordered is None else ordered

    def answers(self, since: Any, roots: tuple[str, ...]) -> bool:
        """Whether a scan sent with ``since`` over ``roots`` is a delta on this state."""
        return since is not None and since == self.token and roots == self.roots

    def apply(self, changed: Iterable[ScanRow], removed: Iterable[str]) -> None:
        """Apply a delta to ``rows`` in place (``ordered`` is left to the holder)."""
        rows = self.rows
        for path in removed:
            rows.pop(path, None)
        rows.update((r[0], r) for r in changed)
