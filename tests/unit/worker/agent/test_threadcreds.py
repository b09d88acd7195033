"""One thread acting as the user (``worker.agent.threadcreds``, ``processes.as_user_here``).

Real credentials on this host, as root (as in CI): the thread reaches files as
uid 1000, the process's other threads stay root, and the scan gives what the
forking ``as_user`` gave. That a user's process can neither signal, trace nor
``prlimit`` the agent meanwhile, under runc and runsc, is
tests/integration/test_scan_thread_contract.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.agent import processes, scan
from worker.agent.errors import AgentError
from worker.agent.processes import as_user, as_user_here
from worker.agent.threadcreds import acting_as_user, supported

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not supported(), reason="changes a thread's ids: needs root"
)


@pytest.fixture
def tree() -> Iterator[Path]:
    """A directory of the user's with a file of theirs and one only root may read."""
    path = Path(tempfile.mkdtemp(prefix="sg-threadcreds-", dir="/tmp"))
    path.chmod(0o755)
    (path / "mine").write_text("mine\n")
    os.chown(path / "mine", 1000, 1000)
    (path / "mine").chmod(0o600)
    (path / "roots").write_text("secret\n")
    (path / "roots").chmod(0o600)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


def ids() -> tuple[int, int, list[int]]:
    return os.geteuid(), os.getegid(), os.getgroups()


def test_the_thread_reaches_files_as_the_user_then_is_root_again(tree: Path) -> None:
    before = ids()
    with acting_as_user():
        assert ids() == (1000, 1000, [])
        assert os.getuid() == 0  # the real id stays root: the user cannot signal it
        assert (tree / "mine").read_text() == "mine\n"
        with pytest.raises(PermissionError):
            (tree / "roots").read_text()
        with pytest.raises(PermissionError):
            os.chmod(tree / "roots", 0o644)
    assert ids() == before
    assert (tree / "roots").read_text() == "secret\n"


def test_other_threads_stay_root_meanwhile() -> None:
    inside, seen = threading.Event(), threading.Event()
    other: list[tuple[int, int, list[int]]] = []

    def act() -> None:
        with acting_as_user():
            inside.set()
            seen.wait(10)

    t = threading.Thread(target=act)
    t.start()
    assert inside.wait(10)
    other.append(ids())
    seen.set()
    t.join()
    assert other == [(0, 0, os.getgroups())] and os.geteuid() == 0


def test_ids_come_back_when_the_function_raises(tree: Path) -> None:
    before = ids()
    with pytest.raises(AgentError) as caught:
        as_user_here(Path.read_text, tree / "roots")
    assert caught.value.code == "invalid_input" and "Permission denied" in str(caught.value)
    assert ids() == before


@pytest.mark.parametrize(
    "fn",
    [
        lambda p: (p / "mine").read_text(),
        lambda p: (p / "roots").read_text(),
        lambda p: int("x"),
        lambda p: os.listdir(p / "missing"),
    ],
    ids=["result", "permission", "value_error", "missing"],
)
def test_same_answer_as_the_forking_as_user(tree: Path, fn: object) -> None:
    def outcome(run: object) -> object:
        try:
            return ("ok", run(fn, tree))  # type: ignore[operator]
        except AgentError as exc:
            return ("error", exc.body())

    assert outcome(as_user_here) == outcome(as_user)


def test_the_scan_walks_on_its_thread_and_answers_as_the_fork_did(tree: Path) -> None:
    (tree / "roots").unlink()
    (tree / "sub").mkdir()
    (tree / "sub" / "closed").write_text("the user closed it\n")
    for path in (tree / "sub", tree / "sub" / "closed"):
        os.chown(path, 1000, 1000)
    (tree / "sub" / "closed").chmod(0o200)  # the scan opens it as its owner may
    roots = (str(tree),)
    assert processes.IN_THREAD
    here = json.loads(json.dumps(as_user_here(scan.scan_diff, roots, {})))
    forked = as_user(scan.scan_diff, roots, {})
    del here["keys"], forked["keys"]  # ctime: the open of the closed file moved it
    assert here == forked
    assert {row[0] for row in here["changed"]} == {
        str(tree / "mine"),
        str(tree / "sub"),
        str(tree / "sub" / "closed"),
    }


def _make(where: str) -> list[int]:
    """Make a directory, a file in it, write to a file the user owns: what a
    file operation does; the owner and mode of each."""
    base = Path(where)
    (base / "made").mkdir()
    fd = os.open(base / "made" / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.close(fd)
    with open(base / "mine", "a") as f:
        f.write("more\n")
    out = []
    for p in (base / "made", base / "made" / "f"):
        st = p.stat()
        out += [st.st_uid, st.st_gid, st.st_mode & 0o777]
    return out


def test_a_file_operation_on_the_thread_makes_what_the_fork_made(tree: Path) -> None:
    """Issue 22.2: file ops (the snapshot's ``pack`` among them) run on the
    agent's thread, no fork; what they create is the user's, with the modes the
    forked child's umask gave, and a root-only file stays out of reach."""
    os.chown(tree, 1000, 1000)
    old = os.umask(0o022)  # the agent's, set at start (main)
    try:
        (tree / "a").mkdir()
        (tree / "b").mkdir()
        for d in ("a", "b"):
            os.chown(tree / d, 1000, 1000)
            os.link(tree / "mine", tree / d / "mine")
        here = processes.as_user_files(_make, str(tree / "a"))
        forked = as_user(_make, str(tree / "b"))
    finally:
        os.umask(old)
    assert here == forked == [1000, 1000, 0o755, 1000, 1000, 0o644]
    with pytest.raises(AgentError):
        processes.as_user_files(Path.read_text, tree / "roots")
    assert ids() == (0, 0, ids()[2])
