"""The client's side of a batch on disk: the jobs file, the results journal, the sidecar.

The results file *is* the journal: one ``BatchResult`` JSON line per job id,
appended, flushed and fsynced line by line, so that after a Ctrl-C, a kill or a
power cut every line in it is whole and final. Running the same command again
reads the ids already there and asks only for the others; a torn last line (a
write cut short) is cut off first. Every id appears exactly once.

The sidecar (``<results>.batch``) remembers which server batch the results come
from, so that a second run re-attaches to it (jobs still running there are not
run twice) instead of submitting the missing jobs anew; without it, or when the
server no longer knows the batch, the missing jobs are simply submitted again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from sandgrid.batch.models import BatchJob, BatchResult
from sandgrid.errors import InvalidInput

__all__ = ["Journal", "Sidecar", "SidecarState", "file_sha256", "read_jobs"]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _bad_line(path: Path, number: int, why: str) -> InvalidInput:
    return InvalidInput(
        f"{path}:{number}: {why}",
        operation="batch.jobs",
        context={"field": f"{path.name}:{number}", "rule": why},
    )


def read_jobs(path: Path) -> list[BatchJob]:
    """The jobs of a JSONL file (blank lines skipped), checked line by line.

    Raises:
        InvalidInput: a line that is not a valid job, or a repeated id; the message
            names the file, the line and the rule.
    """
    jobs: list[BatchJob] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                job = BatchJob.model_validate_json(line)
                job.exec_request()  # exactly one of argv, shell, python; sizes
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise _bad_line(path, number, f"{where}: {first['msg']}") from None
            if job.id in seen:
                raise _bad_line(path, number, f"id {job.id!r} repeats line {seen[job.id]}")
            seen[job.id] = number
            jobs.append(job)
    return jobs


class Journal:
    """The append-only results file.

    Args:
        path: the results file (created on the first append).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: set[str] = set()
        self.results: list[BatchResult] = []
        self._file: IO[bytes] | None = None

    def load(self) -> set[str]:
        """Read the ids already recorded; cut a torn last line off first.

        Raises:
            InvalidInput: a complete line that is not a result (the file is not a
                journal of this tool); nothing is changed then.
        """
        if not self.path.exists():
            return set()
        data = self.path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        for number, line in enumerate(whole.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                result = BatchResult.model_validate_json(line)
            except ValidationError as exc:
                why = f"not a batch result: {exc.errors()[0]['msg']}"
                raise _bad_line(self.path, number, why) from None
            if result.id not in self.ids:
                self.ids.add(result.id)
                self.results.append(result)
        if len(whole) < len(data):
            with self.path.open("r+b") as f:
                f.truncate(len(whole))
                os.fsync(f.fileno())
        return set(self.ids)

    def append(self, result: BatchResult) -> bool:
        """Write one result line durably; False (nothing written) for a known id."""
        if result.id in self.ids:
            return False
        if self._file is None:
            self._file = self.path.open("ab")
        self._file.write(result.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.ids.add(result.id)
        self.results.append(result)
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True)
class SidecarState:
    batch_id: str
    jobs_sha256: str
    api_url: str


class Sidecar:
    """``<results>.batch``: the server batch the results file is being filled from."""

    def __init__(self, results_path: Path) -> None:
        self.path = results_path.with_name(results_path.name + ".batch")

    def load(self) -> SidecarState | None:
        try:
            raw = json.loads(self.path.read_text())
            return SidecarState(str(raw["batch_id"]), str(raw["jobs_sha256"]), str(raw["api_url"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, state: SidecarState) -> None:
        """Write atomically (temp file, fsync, rename)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as f:
            json.dump(state.__dict__, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
