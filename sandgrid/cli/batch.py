"""``sandgrid batch``: run a JSONL of jobs on the grid, resumably.

    sandgrid batch run jobs.jsonl --out results.jsonl --type python --concurrency 8
    sandgrid batch status ID | sandgrid batch cancel ID

``run`` submits the jobs that have no line in the results file yet (the
journal, ``sandgrid.batch.journal``), follows the server batch, and appends
each result as it arrives (flushed and fsynced per line). Ctrl-C (or SIGTERM)
cancels the server batch and exits 130; a kill -9 leaves it running. Either
way, running the same command again finishes the batch: it re-attaches to the
server batch if it still exists (resuming it if it was cancelled or
interrupted), else submits only the missing jobs. Every job id ends in the
results file exactly once. Exit status: 0 when every job has a result (whatever
its status; see the summary), 1 on an error of the tool or the grid, 130 when
interrupted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console

from sandgrid.batch.journal import Journal, Sidecar, SidecarState, file_sha256, read_jobs
from sandgrid.batch.models import BatchInfo, BatchJob
from sandgrid.batch.progress import ProgressView, summary_table
from sandgrid.cli.helpers import EXIT_INTERRUPTED, err_console, readable_errors
from sandgrid.errors import NotFound, SandgridError

__all__ = ["batch", "cancel", "execute", "follow", "run", "status"]


@click.group()
def batch() -> None:
    """Run batches of jobs (JSONL in, JSONL out), resumably."""


@batch.command(name="run")
@click.argument("jobs_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--type", "type_", default="python", show_default=True, help="sandbox type")
@click.option("--concurrency", type=int, default=8, show_default=True, help="jobs in flight")
@click.option(
    "--isolation",
    type=click.Choice(["job", "lane"]),
    default="job",
    show_default=True,
    help="job: a fresh sandbox per job; lane: reuse a sandbox per lane, emptied between jobs",
)
@click.option("--max-attempts", type=int, default=4, show_default=True, help="on infra errors")
@click.option("--poll", type=float, default=0.5, show_default=True, help="seconds between polls")
@readable_errors
def run(
    jobs_file: Path,
    out: Path,
    type_: str,
    concurrency: int,
    isolation: str,
    max_attempts: int,
    poll: float,
) -> None:
    """Run JOBS_FILE (one BatchJob JSON per line); results go to --out, one line per job."""
    execute(jobs_file, out, type_, concurrency, isolation, max_attempts, poll)


def execute(
    jobs_file: Path,
    out: Path,
    type_: str = "python",
    concurrency: int = 8,
    isolation: str = "job",
    max_attempts: int = 4,
    poll: float = 0.5,
    *,
    client: Any = None,
) -> Journal:
    """Run a jobs file to completion into ``out`` (resuming), show progress and the
    summary; the journal holds every job's result. Exits 130 when interrupted."""
    from sandgrid.client import Client

    jobs = read_jobs(jobs_file)
    journal = Journal(out)
    journal.load()
    wanted = {j.id for j in jobs}
    remaining = [j for j in jobs if j.id not in journal.ids]
    t0 = time.monotonic()
    if not remaining:
        err_console.print(f"all {len(jobs)} jobs already have a result in {out}")
        _summary(journal, wanted, t0, 0)
        return journal
    done = [r for r in journal.results if r.id in wanted]
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(Client())
        stack.enter_context(_interrupts())
        batch_id = _attach_or_submit(
            client, out, jobs_file, remaining, type_, concurrency, isolation, max_attempts
        )
        view = ProgressView(batch_id, len(jobs), done, err_console)
        try:
            with view:
                follow(client, journal, batch_id, wanted, view, poll)
        except KeyboardInterrupt:
            with contextlib.suppress(SandgridError):
                client.cancel_batch(batch_id)
            journal.close()
            err_console.print(
                f"[yellow]interrupted[/yellow]: {view.done} of {len(jobs)} jobs have a result "
                f"in {out}; run the same command again to finish"
            )
            sys.exit(EXIT_INTERRUPTED)
    journal.close()
    Sidecar(out).remove()
    _summary(journal, wanted, t0, view.done - view.at_start)
    return journal


def _attach_or_submit(
    client: Any,
    out: Path,
    jobs_file: Path,
    remaining: list[BatchJob],
    type_: str,
    concurrency: int,
    isolation: Any,
    max_attempts: int,
) -> str:
    """The server batch to follow: the one the sidecar names (resumed if it
    stopped), else a new batch of the jobs that have no result yet."""
    sidecar = Sidecar(out)
    sha = file_sha256(jobs_file)
    state = sidecar.load()
    if state is not None and state.jobs_sha256 == sha and state.api_url == client.base_url:
        try:
            info: BatchInfo = client.get_batch(state.batch_id)
        except NotFound:
            info = None  # type: ignore[assignment]
        if info is not None:
            if info.state in ("cancelled", "interrupted", "cancelling"):
                client.resume_batch(info.id)
            err_console.print(f"re-attached to batch {info.id} ({info.state})")
            return info.id
    info = client.create_batch(
        remaining,
        type=type_,
        concurrency=concurrency,
        isolation=isolation,
        max_attempts=max_attempts,
    )
    sidecar.save(SidecarState(info.id, sha, client.base_url))
    err_console.print(f"batch {info.id}: {len(remaining)} jobs submitted")
    return info.id


def follow(
    client: Any,
    journal: Journal,
    batch_id: str,
    wanted: set[str],
    view: ProgressView,
    poll_s: float,
) -> BatchInfo:
    """Append the batch's results to the journal until every wanted id has one.

    A batch that stops without finishing (its API process restarted) is resumed.

    Raises:
        SandgridError: the batch was cancelled elsewhere, or ended with ids missing.
    """
    offset = 0
    while True:
        info: BatchInfo = client.get_batch(batch_id)
        while True:  # drain: results written before ``info`` was read
            results, offset = client.batch_results(batch_id, offset)
            for r in results:
                if r.id in wanted and journal.append(r):
                    view.add(r)
            if not results:
                break
        view.refresh()
        if wanted <= journal.ids:
            return info
        if info.state == "interrupted":
            client.resume_batch(batch_id)
        elif info.state in ("cancelled", "done"):
            missing = len(wanted - journal.ids)
            raise SandgridError(
                f"batch {batch_id} is {info.state} with {missing} jobs without a result; "
                "run the same command again to run them"
            )
        time.sleep(poll_s)


@contextlib.contextmanager
def _interrupts() -> Any:
    """SIGTERM behaves as Ctrl-C: cancel the server batch, keep the journal whole."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _summary(journal: Journal, wanted: set[str], t0: float, ran: int) -> None:
    results = [r for r in journal.results if r.id in wanted]
    Console(stderr=True).print(summary_table(results, time.monotonic() - t0, ran))


@batch.command(name="status")
@click.argument("batch_id")
@readable_errors
def status(batch_id: str) -> None:
    """Progress of a batch: counts, rate, ETA, state."""
    from sandgrid.client import Client

    with Client() as client:
        info = client.get_batch(batch_id)
    click.echo(info.model_dump_json(indent=2))


@batch.command(name="cancel")
@click.argument("batch_id")
@readable_errors
def cancel(batch_id: str) -> None:
    """Cancel a batch: jobs in flight finish, no new job starts."""
    from sandgrid.client import Client

    with Client() as client:
        info = client.cancel_batch(batch_id)
    click.echo(f"{info.id} {info.state}")
