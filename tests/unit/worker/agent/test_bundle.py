"""The agent's zipapp: the same bytes for the same sources, cached by content, and it runs."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from worker.agent_client import bundle as agent_bundle
from worker.agent_client.bundle import PACKAGE, SOURCE_DIR, build_zipapp, zipapp_bytes


def test_the_same_sources_give_the_same_bytes(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SOURCE_DIR, copy)  # new mtimes, and perhaps a new listing order
    for path in copy.glob("*.py"):
        path.touch()
    assert zipapp_bytes(copy) == zipapp_bytes(SOURCE_DIR) == zipapp_bytes()
    (copy / "limits.py").write_text((copy / "limits.py").read_text() + "\n# changed\n")
    assert zipapp_bytes(copy) != zipapp_bytes()


def test_the_archive_holds_the_package_and_a_main(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_zipapp(tmp_path)) as zf:
        names = zf.namelist()
        infos = zf.infolist()
    assert names == sorted(names) and names[0] == "__main__.py"
    modules = {f"{PACKAGE}/{p.name}" for p in SOURCE_DIR.glob("*.py")}
    assert modules | {m + "c" for m in modules} == set(names[1:])  # each with its bytecode
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_cached_by_content(tmp_path: Path) -> None:
    first = build_zipapp(tmp_path)
    assert first.name.startswith("agent-") and first.suffix == ".pyz"
    stamp = first.stat().st_mtime_ns
    assert build_zipapp(tmp_path) == first and first.stat().st_mtime_ns == stamp
    first.write_bytes(b"tampered")
    assert build_zipapp(tmp_path).read_bytes() == zipapp_bytes()


def test_a_configured_path_receives_the_build(tmp_path: Path) -> None:
    target = tmp_path / "shared" / "agent.py"
    assert agent_bundle._agent_path(target) == target
    assert target.read_bytes() == zipapp_bytes()


def test_the_default_path_is_a_current_build() -> None:
    path = agent_bundle.agent_path()
    assert path.is_file() and path.read_bytes() == zipapp_bytes()


@pytest.mark.parametrize("name", ["agent.py", "agent.pyz"])
def test_python_runs_the_archive_whatever_its_name(tmp_path: Path, name: str) -> None:
    """As the worker starts it (``python3 -I -S /opt/sandgrid/agent.py``): a ping round trip."""
    path = tmp_path / name
    path.write_bytes(zipapp_bytes())
    body = json.dumps({"id": 7, "op": "ping"}).encode()
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(path)],
        input=struct.pack(">I", len(body)) + body,
        capture_output=True,
        timeout=30,
        check=True,
    )
    (size,) = struct.unpack(">I", done.stdout[:4])
    reply = json.loads(done.stdout[4 : 4 + size])
    assert reply["id"] == 7 and reply["ok"] and reply["result"]["version"] == 1


def _imported_from(archive: Path) -> str:
    """Where the sandbox's Python takes the agent's main module from, in ``archive``."""
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); "
        f"import {PACKAGE}.main as m; print(m.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_the_agent_starts_from_its_bytecode_and_falls_back_to_source(tmp_path: Path) -> None:
    """A start imports the shipped ``.pyc`` (no compile in the sandbox); a Python of another
    bytecode version (a bad magic number here) compiles the ``.py`` beside it instead."""
    archive = build_zipapp(tmp_path)
    assert _imported_from(archive).endswith(f"{PACKAGE}/main.pyc")
    other = tmp_path / "other-python.pyz"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    assert _imported_from(other).endswith(f"{PACKAGE}/main.py")
