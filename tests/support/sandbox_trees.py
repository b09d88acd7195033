"""Host directories standing for a sandbox's ``/`` in snapshot tests: make, fill, compare."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from worker.agent import limits

ROOTS = list(limits.ROOTS)


def new_sandbox(tmp_path: Path, name: str) -> Path:
    for root in ROOTS:
        (tmp_path / name / root.lstrip("/")).mkdir(parents=True)
    return tmp_path / name


def write(sbx: Path, rel: str, data: bytes, mode: int = 0o644) -> None:
    path = sbx / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def tree(sbx: Path) -> dict[str, tuple[str, int, bytes | str]]:
    """Every entry below ``sbx``: kind, mode and content (a link's target)."""
    out: dict[str, tuple[str, int, bytes | str]] = {}
    for p in sorted(sbx.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(sbx))] = ("link", 0, os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[str(p.relative_to(sbx))] = ("dir", stat.S_IMODE(st.st_mode), "")
        else:
            out[str(p.relative_to(sbx))] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out
