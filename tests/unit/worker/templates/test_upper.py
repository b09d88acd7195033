"""runsc's upper layer read from its stdout into the load archive (25.2): what runsc writes
becomes the archive's layer; a failing runsc, or a tar cut short, is an error naming it."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from worker.templates.image import LAYER
from worker.templates.upper import UpperFailed, read_upper


def _runsc(tmp_path: Path, body: str) -> str:
    """A stand-in for runsc: it talks on stdout, as runsc does, then runs ``body``
    (``$out``: the ``--file`` it was given)."""
    path = tmp_path / "runsc"
    args = 'while [ $# -gt 0 ]; do [ "$1" = --file ] && out="$2"; shift; done'
    path.write_text(f"#!/bin/sh\n{args}\necho Serializing the upper layer\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _upper_tar(path: Path) -> Path:
    with tarfile.open(path, "w:", format=tarfile.PAX_FORMAT) as tar:
        data = b"x" * 5000
        info = tarfile.TarInfo("./usr/lib/demo.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_runscs_tar_becomes_the_archives_layer(tmp_path: Path) -> None:
    upper = _upper_tar(tmp_path / "upper.tar")
    archive = tmp_path / "image.tar"
    layer = read_upper(_runsc(tmp_path, f'cat {upper} > "$out"'), tmp_path, "cid", archive)
    with tarfile.open(archive) as tar:
        carried = tar.extractfile(LAYER).read()  # type: ignore[union-attr]
    assert layer.diff_id == f"sha256:{hashlib.sha256(carried).hexdigest()}"
    with tarfile.open(fileobj=io.BytesIO(carried)) as inner:
        assert inner.getnames() == ["usr/lib/demo.py"]


def test_a_failing_runsc_is_an_error_with_its_last_words(tmp_path: Path) -> None:
    runsc = _runsc(tmp_path, "echo 'sandbox is not running' >&2; exit 1")
    with pytest.raises(UpperFailed, match="sandbox is not running"):
        read_upper(runsc, tmp_path, "cid", tmp_path / "image.tar")


def test_a_tar_cut_short_is_an_error(tmp_path: Path) -> None:
    upper = _upper_tar(tmp_path / "upper.tar")
    with pytest.raises(UpperFailed):
        read_upper(
            _runsc(tmp_path, f'head -c 2000 {upper} > "$out"'), tmp_path, "cid", tmp_path / "i.tar"
        )
