"""The agent's extraction (``unpack``, ``tar_put``) keeps links as links and never
writes through one, whatever it points at; run against a temporary directory."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from worker.agent import safetar


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return safetar


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/secret").write_text("untouched")
    return tmp_path / "workspace"


def tar(*members: tuple[str, bytes, str]) -> bytes:
    """A tar of (name, type, link or content) members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = extra
                t.addfile(info)
            elif kind == tarfile.DIRTYPE:
                info.mode = 0o755
                t.addfile(info)
            else:
                data = extra.encode()
                info.size, info.mode = len(data), 0o644
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def extract(agent: ModuleType, root: Path, data: bytes, clear: bool = False) -> int:
    return int(agent.extract(data, str(root), (str(root),), clear))


@pytest.mark.parametrize("target", ["/usr/bin/python3", "../outside", "/etc", "nowhere"])
def test_links_to_anywhere_are_restored_as_links(
    agent: ModuleType, root: Path, target: str
) -> None:
    data = tar((".venv", tarfile.DIRTYPE, ""), (".venv/py", tarfile.SYMTYPE, target))
    assert extract(agent, root, data, clear=True) == 1
    assert os.readlink(root / ".venv/py") == target


@pytest.mark.parametrize("clear", [False, True])
def test_a_member_under_a_link_of_the_same_tar_changes_nothing(
    agent: ModuleType, root: Path, clear: bool
) -> None:
    (root / "keep").write_text("kept")
    for data in (
        tar(("l", tarfile.SYMTYPE, "../outside"), ("l/secret", tarfile.REGTYPE, "pwned")),
        tar(("l/d/x", tarfile.REGTYPE, "pwned"), ("l", tarfile.SYMTYPE, "../outside")),
        tar(("f", tarfile.REGTYPE, "a file"), ("f/x", tarfile.REGTYPE, "under a file")),
    ):
        with pytest.raises(agent.AgentError, match="not a directory"):
            extract(agent, root, data, clear)
    assert (root / "keep").read_text() == "kept"
    assert (root.parent / "outside/secret").read_text() == "untouched"


def test_a_link_on_disk_is_never_written_through(agent: ModuleType, root: Path) -> None:
    os.symlink("../outside", root / "evil")
    with pytest.raises(agent.AgentError, match="not a directory"):
        extract(agent, root, tar(("evil/secret", tarfile.REGTYPE, "pwned")))
    with pytest.raises(agent.AgentError, match="not a directory"):
        extract(agent, root, tar(("evil/new/x", tarfile.REGTYPE, "pwned")))
    assert sorted(os.listdir(root.parent / "outside")) == ["secret"]
    assert (root.parent / "outside/secret").read_text() == "untouched"


def test_a_link_in_the_way_of_a_member_is_replaced_not_followed(
    agent: ModuleType, root: Path
) -> None:
    os.symlink("../outside/secret", root / "file")
    os.symlink("../outside", root / "dir")
    mode = (root.parent / "outside").stat().st_mode
    data = tar(("file", tarfile.REGTYPE, "mine"), ("dir", tarfile.DIRTYPE, ""))
    extract(agent, root, data)
    assert (root / "file").read_text() == "mine" and not (root / "file").is_symlink()
    assert (root / "dir").is_dir() and not (root / "dir").is_symlink()
    assert (root.parent / "outside/secret").read_text() == "untouched"
    assert (root.parent / "outside").stat().st_mode == mode


def test_blocker_reports_the_first_link_or_file_on_the_way(agent: ModuleType, root: Path) -> None:
    (root / "d/e").mkdir(parents=True)
    os.symlink("d", root / "l")
    (root / "f").write_text("")
    roots = (str(root),)
    assert agent.blocker(str(root / "d/e/x"), roots) is None
    assert agent.blocker(str(root / "missing/deep/x"), roots) is None
    assert agent.blocker(str(root / "l/e/x"), roots) == str(root / "l")
    assert agent.blocker(str(root / "f/x"), roots) == str(root / "f")
    assert agent.blocker(str(root / "l"), roots) is None  # the member itself may be a link


def test_a_full_restore_empties_closed_directories_and_never_follows_a_link(
    agent: ModuleType, root: Path
) -> None:
    """``clear`` opens closed directories to rmtree them, relative to their
    parent's fd: a link out is unlinked, its target's modes and files untouched."""
    (root / "closed/deeper").mkdir(parents=True)
    (root / "closed/deeper/f").write_text("x")
    os.chmod(root / "closed/deeper", 0o000)
    os.chmod(root / "closed", 0o000)
    outside = root.parent / "outside"
    os.chmod(outside, 0o500)
    os.symlink(str(outside), root / "out")
    try:
        assert extract(agent, root, tar(("new", tarfile.REGTYPE, "n")), clear=True) == 1
        assert sorted(os.listdir(root)) == ["new"]
        assert oct(os.stat(outside).st_mode & 0o777) == oct(0o500)
        assert (outside / "secret").read_text() == "untouched"
    finally:
        os.chmod(outside, 0o755)
