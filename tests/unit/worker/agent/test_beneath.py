"""The confined resolver (``worker.agent.beneath``) and the file ops over it, on a
temporary tree with links out of it: absolute, relative ``..``, a chain, and a
component swapped for a link in the middle of the walk. Each case runs twice:
with ``openat2`` where this kernel has it, and with the per-component walk alone
(what an older gVisor or kernel gets), which must answer the same."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.agent import beneath, files, limits
from worker.agent.errors import AgentError


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(beneath.Openat2, "available", request.param == "openat2")
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> Path:
    """``tmp/workspace`` (the root) beside ``tmp/outside`` (what must stay untouched)."""
    root, out = tmp_path / "workspace", tmp_path / "outside"
    root.mkdir()
    out.mkdir()
    (out / "secret").write_text("untouched")
    (root / "sub").mkdir()
    (root / "sub/f.txt").write_text("inside")
    os.symlink(str(out), root / "abs_out")  # absolute, out
    os.symlink("../outside", root / "rel_out")  # relative, out
    os.symlink("sub/../../outside", root / "dotdot_out")
    os.symlink("hop1", root / "chain_out")  # chain_out -> hop1 -> sub/hop2 -> ../../outside
    os.symlink("sub/hop2", root / "hop1")
    os.symlink("../../outside", root / "sub/hop2")
    os.symlink("sub", root / "rel_in")  # inside, relative
    os.symlink(str(root / "sub"), root / "abs_in")  # inside, absolute
    os.symlink("rel_in", root / "chain_in")  # a chain that stays inside
    os.symlink("loop", root / "loop")
    monkeypatch.setattr(limits, "WORKSPACE", str(root))
    return root


def untouched(ws: Path) -> None:
    out = ws.parent / "outside"
    assert sorted(p.name for p in out.iterdir()) == ["secret"]
    assert (out / "secret").read_text() == "untouched"


OUT = ["abs_out", "rel_out", "dotdot_out", "chain_out"]


def refused(fn: object, *args: object) -> AgentError:
    with pytest.raises(AgentError) as err:
        fn(*args)  # type: ignore[operator]
    assert err.value.code == "path_outside_workspace", err.value.message
    assert "never follows a symlink out" in err.value.message
    return err.value


@pytest.mark.parametrize("link", OUT)
def test_every_op_through_a_link_out_is_refused(ws: Path, link: str) -> None:
    refused(files.do_read, f"{link}/secret", 100)
    refused(files.do_write, [{"path": f"{link}/new", "data_b64": "eA==", "mode": 0o644}])
    refused(files.do_list, link, False)
    refused(files.do_list, f"{link}/secret", False)
    refused(files.do_stat, f"{link}/secret", True)
    refused(files.do_stat, link, True)
    refused(files.do_mkdir, f"{link}/made")
    refused(files.do_mkdir, f"{link}/deep/made")
    refused(files.do_delete, f"{link}/secret", False)
    refused(files.do_move, f"{link}/secret", "stolen")
    refused(files.do_move, "sub/f.txt", f"{link}/planted")
    refused(files.do_tar_get, link)
    refused(files.do_tar_put, f"{link}/x", _tar("a.txt"))
    refused(files.do_tar_put, link, _tar("a.txt"))
    untouched(ws)
    assert (ws / "sub/f.txt").read_text() == "inside"


def test_the_link_itself_is_data(ws: Path) -> None:
    """A link out may be listed, stat-ed (not followed), moved and deleted as a link."""
    assert files.do_stat("abs_out", False)["type"] == "symlink"
    names = [e["path"] for e in files.do_list(".", False)["entries"]]
    assert "abs_out" in names and "sub" in names
    assert files.do_move("rel_out", "sub/moved_link")["type"] == "symlink"
    assert os.readlink(ws / "sub/moved_link") == "../outside"
    assert files.do_delete("abs_out", False) == {"deleted": 1}
    untouched(ws)


@pytest.mark.parametrize("link", ["rel_in", "abs_in", "chain_in"])
def test_links_that_stay_inside_work(ws: Path, link: str) -> None:
    data = files.do_read(f"{link}/f.txt", 100)
    assert base64.b64decode(data["data_b64"]) == b"inside"
    files.do_write([{"path": f"{link}/w.txt", "data_b64": "eQ==", "mode": 0o600}])
    assert (ws / "sub/w.txt").read_bytes() == b"y"
    assert [e["path"] for e in files.do_list(link, False)["entries"]] == [
        f"{link}/f.txt",
        f"{link}/hop2",
        f"{link}/w.txt",
    ]
    assert files.do_mkdir(f"{link}/d") == {"created": True}
    assert files.do_move(f"{link}/w.txt", f"{link}/d/w2.txt")["path"] == f"{link}/d/w2.txt"
    assert files.do_stat(f"{link}/d/w2.txt", True)["size"] == 1
    assert files.do_tar_put(f"{link}/t", _tar("a.txt")) == {"files": 1}
    assert (ws / "sub/t/a.txt").read_text() == "a.txt"
    assert files.do_delete(f"{link}/d", True) == {"deleted": 2}
    raw = base64.b64decode(files.do_tar_get(link)["data_b64"])
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert "f.txt" in tar.getnames() and "t/a.txt" in tar.getnames()
        assert tar.getmember("hop2").issym()  # a link in the tree is a link member
    untouched(ws)


def test_a_file_link_inside_is_followed_a_file_link_out_refused(ws: Path) -> None:
    os.symlink("sub/f.txt", ws / "to_file")
    os.symlink(str(ws.parent / "outside/secret"), ws / "to_secret")
    assert base64.b64decode(files.do_read("to_file", 100)["data_b64"]) == b"inside"
    refused(files.do_read, "to_secret", 100)
    refused(files.do_write, [{"path": "to_secret", "data_b64": "eA==", "mode": 0o644}])
    refused(files.do_list, "to_secret", False)
    untouched(ws)


def test_dotdot_and_absolute_paths(ws: Path) -> None:
    refused(files.do_read, "../outside/secret", 100)
    refused(files.do_read, "sub/../../outside/secret", 100)
    refused(files.do_read, str(ws.parent / "outside/secret"), 100)
    assert files.do_stat("sub/../sub/f.txt", True)["path"] == "sub/f.txt"
    assert files.do_stat(str(ws / "sub/f.txt"), True)["path"] == "sub/f.txt"


def test_a_loop_is_refused_not_followed_forever(ws: Path) -> None:
    with pytest.raises(AgentError, match="too many symlinks"):
        files.do_read("loop/x", 100)


def test_the_root_cannot_be_deleted_or_moved(ws: Path) -> None:
    for fn, args in ((files.do_delete, (".", True)), (files.do_move, (".", "x"))):
        with pytest.raises(AgentError, match="root"):
            fn(*args)  # type: ignore[operator]
    assert (ws / "sub/f.txt").exists()


def test_mkdir_and_move_answers(ws: Path) -> None:
    assert files.do_mkdir("a/b/c") == {"created": True}
    assert files.do_mkdir("a/b/c") == {"created": False}
    with pytest.raises(AgentError) as err:
        files.do_mkdir("sub/f.txt")
    assert err.value.code == "invalid_input" and "no directory" in err.value.message
    with pytest.raises(AgentError) as err:
        files.do_move("missing", "x")
    assert err.value.code == "not_found"
    for missing in ("missing", "no/such/dir", "sub/f.txt/under_a_file"):
        with pytest.raises(AgentError) as err:
            files.do_stat(missing, True)
        assert err.value.code == "not_found"
        with pytest.raises(AgentError) as err:
            files.do_move(missing, "x")
        assert err.value.code == "not_found"


@contextlib.contextmanager
def _swapping(ws: Path, name: str) -> Iterator[None]:
    """``os.open`` that swaps ``ws/name`` (a directory) for a link out right after the
    walk ``lstat``-ed it: the race the fds close."""
    real_open = os.open
    done = []

    def swap(path: str, flags: int, *args: object, **kw: object) -> int:
        if path == name and not done and kw.get("dir_fd") is not None:
            done.append(1)
            os.rename(ws / name, ws / f"{name}.real")
            os.symlink(str(ws.parent / "outside"), ws / name)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "open", swap)
    try:
        yield
    finally:
        mp.undo()
    assert done, "the swap never ran"


def test_a_component_swapped_for_a_link_mid_walk_cannot_lead_out(ws: Path) -> None:
    """The walk ``lstat``-s ``sub`` (a directory), then a racer replaces it by a link
    out before the walk opens it: the ``O_NOFOLLOW`` open sees the link, the walk
    looks again, and refuses it. Nothing is written outside."""
    beneath.Openat2.available = False  # the race is the walk's (openat2 is atomic)
    with _swapping(ws, "sub"):
        refused(files.do_write, [{"path": "sub/planted", "data_b64": "eA==", "mode": 0o644}])
    untouched(ws)


def test_openat2_where_the_kernel_has_it(ws: Path, mode: str) -> None:
    """The fast path itself: ``RESOLVE_BENEATH`` opens inside and refuses out."""
    root_fd = beneath.open_root(str(ws))
    try:
        try:
            fd = beneath.openat2(root_fd, "rel_in", os.O_PATH, beneath.RESOLVE_BENEATH)
        except OSError as exc:
            pytest.skip(f"no openat2 here: {exc}")
        os.close(fd)
        with pytest.raises(OSError) as err:
            beneath.openat2(root_fd, "rel_out/secret", os.O_RDONLY, beneath.RESOLVE_BENEATH)
        assert err.value.errno == 18  # EXDEV: the kernel's own refusal
    finally:
        os.close(root_fd)


def _tar(*names: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(name)
            t.addfile(info, io.BytesIO(name.encode()))
    return buf.getvalue()
