"""Progress of a batch on the client: a live bar on a terminal, plain lines elsewhere.

On a terminal, a rich progress bar shows done/total, the counts by status, the
rate and the ETA, refreshed as results arrive. When the output is not a
terminal (CI logs, ``nohup``), one plain line is printed every few seconds
instead, so a log shows progress without control characters. Rate and ETA
count only the results that arrived in this run (a resumed batch does not
look faster than it is). ``summary_table`` is printed at the end.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from sandgrid.batch.models import BatchResult

__all__ = ["PLAIN_EVERY_S", "ProgressView", "summary_table"]

#: Seconds between two plain progress lines.
PLAIN_EVERY_S = 5.0


class ProgressView:
    """Shows a batch's progress on ``console`` (stderr in the CLI).

    Args:
        label: a name for the batch (its id).
        total: jobs in the batch, including those already done.
        done: results already in the journal when this run started.
        console: where to draw; a terminal gets the live bar.
        plain_every_s: the period of plain lines when not on a terminal.
    """

    def __init__(
        self,
        label: str,
        total: int,
        done: Iterable[BatchResult],
        console: Console,
        *,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.label = label
        self.total = total
        self.counts: Counter[str] = Counter(r.status for r in done)
        self.at_start = sum(self.counts.values())
        self.console = console
        self.plain_every_s = plain_every_s
        self.started = time.monotonic()
        self._last_plain = 0.0
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[counts]}"),
                TextColumn("{task.fields[speed]}"),
                console=console,
                transient=False,
            )

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def rate(self) -> float:
        """Results per second in this run."""
        elapsed = time.monotonic() - self.started
        ran = self.done - self.at_start
        return ran / elapsed if elapsed > 0 and ran > 0 else 0.0

    def eta_s(self) -> float | None:
        rate = self.rate()
        return (self.total - self.done) / rate if rate > 0 else None

    def line(self) -> str:
        """The plain progress line."""
        eta = self.eta_s()
        return (
            f"batch {self.label}: {self.done}/{self.total} done ({self._counts()}); "
            f"{self.rate():.1f} jobs/s; ETA {_eta(eta)}"
        )

    def _counts(self) -> str:
        c = self.counts
        return f"ok {c['ok']}, failed {c['failed']}, error {c['error']}"

    def __enter__(self) -> ProgressView:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                self.label, total=self.total, completed=self.done, counts="", speed=""
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.refresh(force=True)
        if self._progress is not None:
            self._progress.stop()

    def add(self, result: BatchResult) -> None:
        self.counts[result.status] += 1

    def refresh(self, *, force: bool = False) -> None:
        """Redraw the bar, or print a plain line when its period has passed."""
        if self._progress is not None and self._task is not None:
            speed = f"{self.rate():.1f}/s ETA {_eta(self.eta_s())}"
            self._progress.update(
                self._task, completed=self.done, counts=self._counts(), speed=speed
            )
            return
        now = time.monotonic()
        if force or now - self._last_plain >= self.plain_every_s:
            self._last_plain = now
            self.console.print(self.line(), highlight=False, soft_wrap=True)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.1f}min"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def summary_table(results: list[BatchResult], wall_s: float, ran: int) -> Table:
    """The end-of-run table: statuses, retries, durations, nodes, wall time."""
    counts = Counter(r.status for r in results)
    durations = sorted(r.duration_ms for r in results if r.status != "error")
    retried = sum(1 for r in results if r.attempts > 1)
    nodes = Counter(r.node or "-" for r in results)
    table = Table("", "value", title="batch summary", title_justify="left")
    table.add_row("jobs", str(len(results)))
    for status in ("ok", "failed", "error"):
        table.add_row(status, str(counts[status]))
    table.add_row("retried (attempts > 1)", str(retried))
    if durations:
        table.add_row(
            "duration p50 / p95 / max",
            f"{_pct(durations, 50):.0f} / {_pct(durations, 95):.0f} / {durations[-1]:.0f} ms",
        )
    table.add_row("nodes", ", ".join(f"{n}: {c}" for n, c in sorted(nodes.items())))
    rate = ran / wall_s if wall_s > 0 else 0.0
    table.add_row("this run", f"{ran} results in {wall_s:.1f}s ({rate:.1f} jobs/s)")
    return table
