"""AppWorld tasks on the grid: each task's ground-truth solution, run and evaluated.

The ``appworld`` sandbox type has the ``appworld`` package installed (it pins
pydantic < 2, so it has its own image) and ``appworld install`` done. AppWorld's
tasks and databases come from ``appworld download data``, which needs the
internet: this runner takes that data directory as input (``--data DIR``, the
directory that holds ``datasets/``, ``tasks/``, ``base_dbs/``...).

One job per task id of a dataset (``DIR/datasets/<name>.txt``). The job's files
are the task's own directory and every other top-level entry of the data
directory but ``tasks/`` (shared databases, API docs...), laid out under
``/workspace/data`` (the image sets ``APPWORLD_ROOT=/workspace``). The job's
program (``appworld_task.py``) does what ``appworld verify tasks`` does for one
task: open ``AppWorld(task_id)``, execute the compiled ground-truth solution,
evaluate, and print the evaluation's stats as JSON. A task passes when the
evaluation says ``success``.

Without the data, ``selftest_jobs`` runs what AppWorld can check offline in
the sandbox: its own bundled tests of the apps' APIs (in-memory databases).

Not tested here (no data can be downloaded on this machine): the program
against real task data, and the sizes of real data (a job carries its files
through the JSON API: the runner refuses a task over ``MAX_TASK_BYTES``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from sandgrid.batch.models import BatchJob, BatchResult
from sandgrid.errors import InvalidInput
from sandgrid.models import FileWrite, Quotas

__all__ = [
    "JOB_TIMEOUT_S",
    "MAX_TASK_BYTES",
    "SELFTEST_FILES",
    "TASK_SOURCE",
    "job_for",
    "jobs_for",
    "passed",
    "selftest_jobs",
    "task_files",
    "task_ids",
]

TASK_SOURCE = (Path(__file__).with_name("appworld_task.py")).read_text()
#: AppWorld's own tests that need no downloaded data: the nine apps' APIs on
#: in-memory databases, plus common utilities, SQLModel and SQLite FTS. The
#: image keeps them where ``appworld install`` unpacked them (``$APPWORLD_CACHE``).
SELFTEST_FILES = (
    *(
        f"tests/package/apps/test_{app}.py"
        for app in (  # the quickest first (``--limit`` takes a prefix)
            "admin",
            "supervisor",
            "simple_note",
            "file_system",
            "api_docs",
            "phone",
            "venmo",
            "amazon",
            "todoist",
            "spotify",
            "gmail",
            "splitwise",
        )
    ),
    "tests/package/test_common.py",
    "tests/package/test_sqlmodel.py",
    "tests/package/test_sqlite_fts.py",
    "tests/package/test_factories.py",
)
#: A task's data travels in its job's body (64 MiB request limit, base64).
MAX_TASK_BYTES = 40 << 20
JOB_TIMEOUT_S = 600.0


def _missing(path: Path, what: str) -> InvalidInput:
    return InvalidInput(
        f"--data: {path} has no {what} (give the directory `appworld download data` made)",
        operation="bench.appworld",
        context={"field": "data", "rule": f"contains {what}", "path": str(path)},
    )


def task_ids(data: Path, dataset: str) -> list[str]:
    """The task ids of ``dataset`` (``train``, ``dev``, ``test_normal``...)."""
    listing = data / "datasets" / f"{dataset}.txt"
    if not listing.is_file():
        raise _missing(data, f"datasets/{dataset}.txt")
    return [line.strip() for line in listing.read_text().splitlines() if line.strip()]


def _files_under(root: Path, prefix: str) -> list[tuple[str, Path]]:
    if root.is_file():
        return [(prefix, root)]
    return [
        (f"{prefix}/{p.relative_to(root).as_posix()}", p)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


def task_files(data: Path, task_id: str) -> list[FileWrite]:
    """The files one task needs, as workspace writes under ``data/``.

    Raises:
        InvalidInput: the task directory is missing, or the files exceed
            ``MAX_TASK_BYTES``.
    """
    task_dir = data / "tasks" / task_id
    if not task_dir.is_dir():
        raise _missing(data, f"tasks/{task_id}/")
    picked = _files_under(task_dir, f"data/tasks/{task_id}")
    for entry in sorted(data.iterdir()):
        if entry.name != "tasks":
            picked += _files_under(entry, f"data/{entry.name}")
    size = sum(p.stat().st_size for _, p in picked)
    if size > MAX_TASK_BYTES:
        raise InvalidInput(
            f"task {task_id}: {size} bytes of data exceed {MAX_TASK_BYTES} per job",
            operation="bench.appworld",
            context={"field": "data", "rule": f"<= {MAX_TASK_BYTES} bytes per task"},
        )
    return [
        FileWrite(path=rel, content=base64.b64encode(p.read_bytes()).decode(), encoding="base64")
        for rel, p in picked
    ]


def job_for(data: Path, task_id: str, experiment: str = "sandgrid") -> BatchJob:
    """One task as a batch job; the workspace is sized to its data."""
    files = task_files(data, task_id)
    data_mb = sum(len(f.content) * 3 // 4 for f in files) >> 20
    workspace_mb = max(256, 4 * data_mb + 128)  # data, the task's output copy, logs
    quotas = Quotas(
        workspace_mb=workspace_mb, memory_mb=max(1024, workspace_mb + 768), timeout_s=JOB_TIMEOUT_S
    )
    return BatchJob(
        id=task_id,
        python=TASK_SOURCE,
        stdin=json.dumps({"task_id": task_id, "experiment": experiment}),
        files=files,
        timeout_s=JOB_TIMEOUT_S,
        quotas=quotas,
    )


def jobs_for(data: Path, dataset: str, limit: int | None = None) -> list[BatchJob]:
    return [job_for(data, t) for t in task_ids(data, dataset)[:limit]]


def passed(result: BatchResult) -> bool:
    """Whether the task's evaluation reported success."""
    if result.status != "ok":
        return False
    try:
        return bool(json.loads(result.stdout.strip().splitlines()[-1]).get("success"))
    except (ValueError, IndexError, AttributeError):
        return False


def selftest_jobs(files: tuple[str, ...] = SELFTEST_FILES) -> list[BatchJob]:
    """One job per AppWorld test file that runs offline, in the ``appworld`` sandbox."""
    quotas = Quotas(memory_mb=1024, timeout_s=JOB_TIMEOUT_S)
    return [
        BatchJob(
            id=path.rsplit("/", 1)[-1].removesuffix(".py"),
            shell=f'cd "$APPWORLD_CACHE" && exec python3 -m pytest -q -p no:cacheprovider {path}',
            timeout_s=JOB_TIMEOUT_S,
            quotas=quotas,
        )
        for path in files
    ]
