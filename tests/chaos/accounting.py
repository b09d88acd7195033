"""The accounting of a chaos scenario: what the clients were told against what ran.

Every turn of a scenario appends its own number to a file of its session's
workspace (``echo N >> turns.log``). The client records what it was told of
each turn (``Call``); at the end the files are read back and each number
counted. The exactly-once proof is then plain arithmetic:

- an acknowledged turn (200) is in its file exactly once: absent is *lost*,
  more than once is *run twice*; one answered ``saved: false`` (it ran, but its
  workspace could not be saved, e.g. its sandbox died before the snapshot) may
  be absent, never twice;
- a turn answered with an error is in its file at most once, and the error
  says whether it ran (``context["ran"]``, or a code that by contract is
  answered before the turn is dispatched); what it says must match the file.

``Accounting.table`` renders the figures the issue asks for, and
``Accounting.violations`` lists every broken promise (empty when all hold).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from sandgrid.errors import SandgridError

__all__ = [
    "NOT_RUN_CODES",
    "Accounting",
    "Call",
    "percentile",
    "ran_of",
]

NOT_RUN_CODES = frozenset(
    {
        "registry_unavailable",
        "store_unavailable",
        "no_capacity",
        "backpressure",
        "tenant_limit",
        "session_busy",
        "session_closed",
        "not_found",
        "invalid_input",
        "unauthenticated",
    }
)
"""Codes answered before a turn is dispatched, or (``store_unavailable``, issue 11
item 3) only when it did not run: such an error says "it did not run"."""


def ran_of(exc: Exception) -> bool | None:
    """What an error says of its turn: ran (True), did not run (False), or nothing (None)."""
    if not isinstance(exc, SandgridError):
        return None
    ran = exc.context.get("ran")
    if isinstance(ran, bool):
        return ran
    return False if str(exc.code) in NOT_RUN_CODES else None


@dataclass(frozen=True)
class Call:
    """One turn as its client saw it."""

    session: str
    number: int
    started: float
    latency_s: float
    code: str | None = None
    """None when acknowledged; else the error's code (``client:<Type>`` if not a sandgrid one)."""
    ran: bool | None = None
    """For an error: what it said of the turn (see ``ran_of``)."""
    node: str = ""
    """For an acknowledged turn: the node that ran it."""
    saved: bool = True
    """For an acknowledged turn: whether its workspace was saved (``ExecResult.saved``)."""
    overlapped: bool = False
    """For an error: the turn started and a snapshot of another turn was taken while it
    ran, so whether it ran is not known (``ran`` null); it must be in the file at most
    once (docs/reliability.md, overlapping turns)."""

    @property
    def acknowledged(self) -> bool:
        return self.code is None


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank); NaN of nothing."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Accounting:
    """The calls of one scenario, the files they wrote, and what is left behind.

    Args:
        scenario: its name, the title of the table.
    """

    scenario: str
    calls: list[Call] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    """Session id -> the content of its ``turns.log`` at the end."""
    containers_left: int | None = None
    fault_window: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)

    def record(self, call: Call) -> None:
        self.calls.append(call)

    def fault(self, start: float, end: float | None = None) -> None:
        """The monotonic window in which the fault was in force."""
        self.fault_window = (start, time.monotonic() if end is None else end)

    # ---- the counts ------------------------------------------------------------------

    def _counts(self) -> dict[str, Counter[int]]:
        counts: dict[str, Counter[int]] = {}
        for sid, text in self.files.items():
            counts[sid] = Counter(int(line) for line in text.split() if line.strip().isdigit())
        return counts

    def _seen(self, call: Call) -> int:
        return self._counts().get(call.session, Counter())[call.number]

    @property
    def acknowledged(self) -> list[Call]:
        return [c for c in self.calls if c.acknowledged]

    @property
    def errors(self) -> list[Call]:
        return [c for c in self.calls if not c.acknowledged]

    def lost(self) -> list[Call]:
        counts = self._counts()
        return [c for c in self.acknowledged if c.saved and counts[c.session][c.number] == 0]

    def run_twice(self) -> list[Call]:
        counts = self._counts()
        return [c for c in self.calls if counts[c.session][c.number] > 1]

    def silent_errors(self) -> list[Call]:
        """Errors that do not say whether their turn ran."""
        return [c for c in self.errors if c.ran is None and not c.overlapped]

    def wrong_errors(self) -> list[Call]:
        """Errors whose word on running contradicts the file."""
        counts = self._counts()
        return [
            c
            for c in self.errors
            if c.ran is not None and (counts[c.session][c.number] == 1) != c.ran
        ]

    def acknowledged_after_fault(self) -> int:
        """Turns acknowledged that started after the fault ended: the grid recovered."""
        if self.fault_window is None:
            return len(self.acknowledged)
        end = self.fault_window[1]
        return sum(1 for c in self.acknowledged if c.started >= end)

    def error_codes(self) -> Counter[str]:
        return Counter(str(c.code) for c in self.errors)

    def latencies(self) -> list[float]:
        return [c.latency_s for c in self.acknowledged]

    # ---- the verdict ---------------------------------------------------------------

    def violations(self) -> list[str]:
        """Every broken promise, in words; empty when the scenario held."""
        out: list[str] = []
        for what, calls in (
            ("lost (acknowledged, absent from the file)", self.lost()),
            ("run twice", self.run_twice()),
            ("errors that do not say whether the turn ran", self.silent_errors()),
            ("errors whose word on running contradicts the file", self.wrong_errors()),
        ):
            if calls:
                shown = ", ".join(f"#{c.number}({c.code or 'ok'})" for c in calls[:10])
                out.append(f"{len(calls)} {what}: {shown}")
        if self.containers_left:
            out.append(f"{self.containers_left} container(s) left behind")
        if not self.acknowledged_after_fault():
            out.append("no turn acknowledged after the fault ended")
        return out

    def table(self) -> str:
        """The scenario's figures as a Markdown table (docs/reliability.md keeps the latest)."""
        lat = self.latencies()
        codes = ", ".join(f"{k} x{v}" for k, v in sorted(self.error_codes().items())) or "none"
        left = "?" if self.containers_left is None else str(self.containers_left)
        rows = [
            ("turns", str(len(self.calls))),
            ("acknowledged", str(len(self.acknowledged))),
            ("acknowledged after the fault", str(self.acknowledged_after_fault())),
            ("acknowledged, not saved", str(sum(1 for c in self.acknowledged if not c.saved))),
            ("lost (acknowledged, absent)", str(len(self.lost()))),
            ("run twice", str(len(self.run_twice()))),
            ("client-visible errors", f"{len(self.errors)} ({codes})"),
            ("errors silent on whether they ran", str(len(self.silent_errors()))),
            ("errors contradicting the file", str(len(self.wrong_errors()))),
            ("p50 / p99 / max turn latency", _latency(lat)),
            ("slowest error", _latency_ms(max((c.latency_s for c in self.errors), default=None))),
            ("containers left behind", left),
            *(("note", n) for n in self.notes),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"**{self.scenario}**", "", f"| {'':<{width}} | |", f"|{'-' * (width + 2)}|---|"]
        lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
        return "\n".join(lines)


def _latency_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def _latency(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p99, top = percentile(values, 50), percentile(values, 99), max(values)
    return f"{p50 * 1000:.0f} / {p99 * 1000:.0f} / {top * 1000:.0f} ms"
