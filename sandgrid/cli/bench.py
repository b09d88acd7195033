"""``sandgrid bench``: benchmarks run as batches on the grid.

    sandgrid bench bfcl [--per-category N] [--concurrency 8] [--isolation lane]
    sandgrid bench appworld --data DIR [--dataset train] [--limit N]
    sandgrid bench appworld --selftest

``bfcl`` turns the multi-turn entries of the installed ``bfcl_eval`` into batch
jobs on the ``bfcl`` sandbox type, runs them (resumably, like ``sandgrid batch
run``), runs the same program on the host one entry after another, and checks
that every entry's output is identical; it prints both wall times and exits 1
unless all are identical. ``appworld`` runs a dataset's tasks' ground-truth
solutions on the ``appworld`` type and reports how many evaluations succeed;
without the data (it needs the internet), ``--selftest`` runs AppWorld's own
offline tests of its apps in that sandbox type.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from sandgrid.batch.journal import Journal
from sandgrid.batch.models import BatchJob
from sandgrid.cli.batch import execute
from sandgrid.cli.helpers import err_console, readable_errors

__all__ = ["WORKDIR", "appworld", "bench", "bfcl"]

WORKDIR = click.Path(file_okay=False, path_type=Path)


@click.group()
def bench() -> None:
    """Benchmarks as batches: BFCL, AppWorld."""


def _write_jobs(path: Path, jobs: list[BatchJob]) -> None:
    """Write the jobs file once (an unchanged file keeps a resumable run resumable)."""
    text = "".join(j.model_dump_json(exclude_defaults=True) + "\n" for j in jobs)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _run(jobs: list[BatchJob], workdir: Path, name: str, **kw: object) -> tuple[Journal, float]:
    workdir.mkdir(parents=True, exist_ok=True)
    jobs_file, out = workdir / f"{name}-jobs.jsonl", workdir / f"{name}-results.jsonl"
    _write_jobs(jobs_file, jobs)
    t0 = time.perf_counter()
    journal = execute(jobs_file, out, **kw)  # type: ignore[arg-type]
    return journal, time.perf_counter() - t0


@bench.command(name="bfcl")
@click.option("--per-category", type=int, default=None, help="first N entries of each category")
@click.option("--categories", default="base,miss_func,miss_param,long_context", show_default=True)
@click.option("--concurrency", type=int, default=8, show_default=True)
@click.option("--isolation", type=click.Choice(["job", "lane"]), default="lane", show_default=True)
@click.option("--workdir", type=WORKDIR, default=Path("bfcl-run"), show_default=True)
@click.option("--fresh", is_flag=True, help="drop the results of an earlier run first")
@readable_errors
def bfcl(
    per_category: int | None,
    categories: str,
    concurrency: int,
    isolation: str,
    workdir: Path,
    fresh: bool,
) -> None:
    """BFCL multi-turn ground truth on the grid, checked against the host."""
    from sandgrid.benchmarks import bfcl as b

    cats = tuple(c.strip() for c in categories.split(",") if c.strip())
    entries = b.load_entries(cats, per_category)
    if fresh:
        (workdir / "bfcl-results.jsonl").unlink(missing_ok=True)
        (workdir / "bfcl-results.jsonl.batch").unlink(missing_ok=True)
    journal, grid_s = _run(
        [b.job_for(e) for e in entries],
        workdir,
        "bfcl",
        type_="bfcl",
        concurrency=concurrency,
        isolation=isolation,
    )
    err_console.print(f"host: running {len(entries)} entries one after another...")
    host, host_s = b.host_reference(entries)
    report = b.compare(journal.results, host)
    table = Table("", "value", title="BFCL multi-turn: grid vs host", title_justify="left")
    table.add_row("entries", str(len(entries)))
    table.add_row("identical", f"{len(report.identical)}/{len(entries)}")
    table.add_row("grid wall (this run)", f"{grid_s:.1f}s ({isolation}, concurrency {concurrency})")
    table.add_row("host wall (sequential)", f"{host_s:.1f}s")
    if grid_s > 0:
        table.add_row("host / grid", f"{host_s / grid_s:.2f}x")
    for label, ids in (("different", report.different), ("missing", report.missing)):
        if ids:
            table.add_row(label, ", ".join(ids[:10]) + (" …" if len(ids) > 10 else ""))
    Console().print(table)
    if not report.all_identical:
        sys.exit(1)


@bench.command(name="appworld")
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="the directory `appworld download data` made; without it: --selftest",
)
@click.option("--selftest", is_flag=True, help="run AppWorld's own offline tests instead")
@click.option("--dataset", default="train", show_default=True)
@click.option("--limit", type=int, default=None, help="first N tasks (or test files)")
@click.option("--concurrency", type=int, default=4, show_default=True)
@click.option("--workdir", type=WORKDIR, default=Path("appworld-run"), show_default=True)
@readable_errors
def appworld(
    data: Path | None,
    selftest: bool,
    dataset: str,
    limit: int | None,
    concurrency: int,
    workdir: Path,
) -> None:
    """AppWorld tasks' ground-truth solutions on the grid, evaluated; or, with
    --selftest (no data needed), AppWorld's bundled app tests in the sandbox."""
    from sandgrid.benchmarks import appworld as a
    from sandgrid.errors import InvalidInput

    if data is None and not selftest:
        raise InvalidInput("give --data DIR (from `appworld download data`) or --selftest")
    if data is None:
        jobs, name = a.selftest_jobs()[:limit], "appworld-selftest"
    else:
        jobs, name = a.jobs_for(data, dataset, limit), f"appworld-{dataset}"
    journal, wall_s = _run(
        jobs, workdir, name, type_="appworld", concurrency=concurrency, isolation="job"
    )
    passing = a.passed if data is not None else (lambda r: r.status == "ok")
    ok = [r for r in journal.results if passing(r)]
    Console().print(f"{name}: {len(ok)}/{len(jobs)} passed in {wall_s:.1f}s")
    for r in journal.results:
        if not passing(r):
            tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [str(r.error)]
            Console().print(f"  {r.id}: {r.status} {tail[0][:200]}")
    if len(ok) < len(jobs):
        sys.exit(1)
