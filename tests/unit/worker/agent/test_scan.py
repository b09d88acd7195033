"""The agent's ``scan``: rows, deltas on a token, hashes and rows reused; and the
worker's side of it (``AgentFiles.scan``) with a scripted channel.

The agent package runs in this process on a temporary tree: its roots
(``limits.ROOTS``) point there, its scan state starts empty, and ``as_user_files``
runs the walk in place, with the JSON round trip of the real pipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandgrid.errors import SandboxError, SandboxLost
from sandgrid.models import Quotas
from worker.agent import limits, main
from worker.agent import scan as scan_module
from worker.runtimes import Runtime, SandboxSpec
from worker.sandboxes import Sandbox, SandboxManager


def scan(agent: ModuleType, roots: list[str], since: Any = None) -> dict[str, Any]:
    req: dict[str, Any] = {"id": 1, "op": "scan", "roots": roots}
    if since is not None:
        req["since"] = since
    reply = json.loads(json.dumps(main.handle(req)))
    assert reply["ok"], reply
    return dict(reply["result"])


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def by_path(rows: list[list[Any]]) -> dict[str, list[Any]]:
    return {r[0]: r for r in rows}


def apply(rows: dict[str, list[Any]], delta: dict[str, Any]) -> dict[str, list[Any]]:
    out = {p: r for p, r in rows.items() if p not in set(delta["removed"])}
    out.update(by_path(delta["changed"]))
    return out


def test_full_scan_rows(agent: ModuleType, ws: Path) -> None:
    reply = scan(agent, list(limits.ROOTS))
    assert set(reply) == {"token", "entries"} and len(reply["token"]) == 16
    rows = by_path(reply["entries"])
    w, h = limits.ROOTS
    assert rows == {
        f"{w}/a.txt": [f"{w}/a.txt", "file", 0o644, 2, sha("a\n"), None],
        f"{w}/ro.txt": [f"{w}/ro.txt", "file", 0o400, 3, sha("ro\n"), None],
        f"{w}/d": [f"{w}/d", "dir", 0o755, 0, None, None],
        f"{w}/d/b.txt": [f"{w}/d/b.txt", "file", 0o644, 2, sha("b\n"), None],
        f"{w}/d/e": [f"{w}/d/e", "dir", 0o755, 0, None, None],
        f"{w}/d/e/c.txt": [f"{w}/d/e/c.txt", "file", 0o644, 2, sha("c\n"), None],
        f"{w}/link": [f"{w}/link", "symlink", 0o777, 0, None, "d/b.txt"],
        f"{h}/.rc": [f"{h}/.rc", "file", 0o644, 2, sha("h\n"), None],
    }  # the roots themselves and the fifo are not entries
    only_ws = scan(agent, [w])
    assert {r[0] for r in only_ws["entries"]} == {p for p in rows if p.startswith(w + "/")}


def test_delta_after_changes(agent: ModuleType, ws: Path) -> None:
    roots = list(limits.ROOTS)
    first = scan(agent, roots)
    (ws / "a.txt").write_text("changed\n")
    (ws / "new.txt").write_text("new\n")
    (ws / "d" / "b.txt").unlink()
    shutil.rmtree(ws / "d" / "e")
    (ws / "d" / "e").symlink_to("/etc")  # a dir replaced by a link: its children are gone
    (ws / "ro.txt").chmod(0o600)  # mode only: a new row, the same hash
    delta = scan(agent, roots, since=first["token"])
    assert set(delta) == {"token", "since", "changed", "removed"}
    assert delta["since"] == first["token"] and delta["token"] != first["token"]
    w = roots[0]
    assert sorted(delta["removed"]) == [f"{w}/d/b.txt", f"{w}/d/e/c.txt"]
    assert by_path(delta["changed"]) == {
        f"{w}/a.txt": [f"{w}/a.txt", "file", 0o644, 8, sha("changed\n"), None],
        f"{w}/new.txt": [f"{w}/new.txt", "file", 0o644, 4, sha("new\n"), None],
        f"{w}/d/e": [f"{w}/d/e", "symlink", 0o777, 0, None, "/etc"],
        f"{w}/ro.txt": [f"{w}/ro.txt", "file", 0o600, 3, sha("ro\n"), None],
    }
    full = scan(agent, roots)  # no since: every row
    assert apply(by_path(first["entries"]), delta) == by_path(full["entries"])
    again = scan(agent, roots, since=full["token"])
    assert (again["changed"], again["removed"]) == ([], [])


def test_unknown_old_or_foreign_token_gives_a_full_scan(agent: ModuleType, ws: Path) -> None:
    roots = list(limits.ROOTS)
    first = scan(agent, roots)
    assert set(scan(agent, roots, since="0123456789abcdef")) == {"token", "entries"}
    assert set(scan(agent, roots, since=first["token"])) == {"token", "entries"}  # superseded
    latest = scan(agent, roots)
    other_roots = scan(agent, roots[:1], since=latest["token"])
    assert "entries" in other_roots  # a delta holds only for the same roots
    assert "entries" in scan(agent, roots, since=other_roots["token"])
    assert "entries" in scan(agent, roots, since=123)
    assert "changed" in scan(agent, roots, since=scan(agent, roots)["token"])


def test_unchanged_files_are_neither_read_nor_given_new_rows(
    agent: ModuleType, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = list(limits.ROOTS)
    read: list[str] = []
    real = agent.sha256_of
    monkeypatch.setattr(agent, "sha256_of", lambda p: read.append(p) or real(p))
    token = scan(agent, roots)["token"]
    assert len(read) == 5
    rows = dict(agent.SCANNED.rows)
    read.clear()
    (ws / "d" / "b.txt").write_text("bb\n")
    (ws / "a.txt").chmod(0o640)
    delta = scan(agent, roots, since=token)
    # the chmod-ed file is read again too: its ctime moved (a rewrite that kept
    # size and mtime moves it just the same, and must not keep a stale hash)
    assert sorted(read) == sorted([str(ws / "d" / "b.txt"), str(ws / "a.txt")])
    assert {r[0] for r in delta["changed"]} == {str(ws / "d" / "b.txt"), str(ws / "a.txt")}
    after = agent.SCANNED.rows
    for path, row in rows.items():
        if path not in (str(ws / "d" / "b.txt"), str(ws / "a.txt")):
            assert after[path] is row, path
    assert agent.HASHES[str(ws / "d" / "b.txt")][4] == sha("bb\n")


def test_a_full_scan_does_not_trust_the_remembered_rows(agent: ModuleType, ws: Path) -> None:
    roots = list(limits.ROOTS)
    first = scan(agent, roots)
    bogus = str(ws / "not-there")
    agent.SCANNED.rows[bogus] = [bogus, "file", 0o644, 1, "0" * 64, None]
    row = agent.SCANNED.rows[str(ws / "a.txt")]
    agent.SCANNED.rows[row[0]] = (*row[:2], 0o777, *row[3:])
    assert scan(agent, roots)["entries"] == first["entries"]


def test_state_follows_every_scan(agent: ModuleType, ws: Path) -> None:
    """Hashes and rows of removed files are forgotten; a file that comes back is read."""
    roots = list(limits.ROOTS)
    token = scan(agent, roots)["token"]
    gone = str(ws / "a.txt")
    os.rename(gone, ws / "moved")
    token = scan(agent, roots, since=token)["token"]
    assert gone not in agent.SCANNED.rows and gone not in agent.HASHES
    os.rename(ws / "moved", gone)
    delta = scan(agent, roots, since=token)
    assert by_path(delta["changed"])[gone][4] == sha("a\n")
    assert delta["removed"] == [str(ws / "moved")]
    assert stat.S_ISREG(os.lstat(gone).st_mode)


# ---- the worker's side: AgentFiles.scan -----------------------------------------------


class ScriptedChannel:
    """Answers ``scan`` requests with the given replies, remembering the requests."""

    def __init__(self, *replies: dict[str, Any] | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def request(self, op: str, fields: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.requests.append({"op": op, **fields})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def close(self) -> None:
        pass


class StubRuntime(Runtime):
    name = "stub"

    def create(self, spec: SandboxSpec) -> str:
        raise NotImplementedError

    def attach(self, sandbox_id: str, name: str) -> Any:
        raise NotImplementedError

    def start(self, sandbox_id: str) -> None:
        raise NotImplementedError

    def remove(self, sandbox_id: str) -> None:
        pass

    def inspect(self, sandbox_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def list_labelled(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        raise NotImplementedError


def stub_manager() -> SandboxManager:
    return SandboxManager(StubRuntime())


ROOTS = list(limits.ROOTS)
F = ["/workspace/f", "file", 0o644, 1, "a" * 64, None]
G = ["/workspace/g", "file", 0o644, 2, "b" * 64, None]
D = ["/workspace/d", "dir", 0o755, 0, None, None]


def sandbox(channel: ScriptedChannel) -> Sandbox:
    sbx = Sandbox("cid", "sbx", "python", "stub", Quotas(), {})
    sbx.channel = channel  # type: ignore[assignment]
    return sbx


def test_worker_applies_deltas_to_its_rows() -> None:
    channel = ScriptedChannel(
        {"token": "t1", "entries": [G, F, D]},
        {"token": "t2", "since": "t1", "changed": [], "removed": []},
        {"token": "t3", "since": "t2", "changed": [[*F[:3], 9, "c" * 64, None]], "removed": [G[0]]},
        {"token": "t4", "entries": [F]},  # the agent chose a full reply: taken as full
    )
    backend, sbx = stub_manager(), sandbox(channel)
    first = backend.files.scan(sbx, ROOTS)
    assert first == [tuple(D), tuple(F), tuple(G)]
    assert backend.files.scan(sbx, ROOTS) == first
    changed_f = ("/workspace/f", "file", 0o644, 9, "c" * 64, None)
    assert backend.files.scan(sbx, ROOTS) == [tuple(D), changed_f]
    assert backend.files.scan(sbx, ROOTS) == [tuple(F)]
    assert [r.get("since") for r in channel.requests] == [None, "t1", "t2", "t3"]
    assert sbx.scan_state is not None and sbx.scan_state.token == "t4"


def test_worker_sends_since_only_for_the_same_roots() -> None:
    channel = ScriptedChannel(
        {"token": "t1", "entries": [F]},
        {"token": "t2", "entries": [F]},
        {"token": "t3", "since": "t2", "changed": [], "removed": []},
    )
    backend, sbx = stub_manager(), sandbox(channel)
    backend.files.scan(sbx, ROOTS)
    backend.files.scan(sbx, ["/workspace"])
    backend.files.scan(sbx, ["/workspace"])
    assert [r.get("since") for r in channel.requests] == [None, None, "t2"]


@pytest.mark.parametrize(
    "bad",
    [
        {"entries": [F]},
        {"token": "t2", "entries": [F[:5]]},
        {"token": "t2", "entries": [[1, *F[1:]]]},
        {"token": "t2", "entries": {"x": F}},
        {"token": "t2", "since": "t1", "changed": [F], "removed": "x"},
        {"token": "t2", "since": "t1", "changed": None, "removed": []},
    ],
    ids=["no-token", "short-row", "path-not-str", "not-a-list", "removed", "changed"],
)
def test_malformed_reply_is_an_error_and_drops_the_rows(bad: dict[str, Any]) -> None:
    channel = ScriptedChannel({"token": "t1", "entries": [F]}, bad, {"token": "t3", "entries": []})
    backend, sbx = stub_manager(), sandbox(channel)
    backend.files.scan(sbx, ROOTS)
    with pytest.raises(SandboxError, match="malformed scan reply"):
        backend.files.scan(sbx, ROOTS)
    assert sbx.scan_state is None
    assert backend.files.scan(sbx, ROOTS) == []
    assert "since" not in channel.requests[-1]


def test_failed_or_lost_requests_drop_the_rows() -> None:
    channel = ScriptedChannel(
        {"token": "t1", "entries": [F]},
        SandboxError("agent failed"),
        {"token": "t2", "entries": [F]},
        SandboxLost("gone"),
    )
    backend, sbx = stub_manager(), sandbox(channel)
    backend.files.scan(sbx, ROOTS)
    with pytest.raises(SandboxError):
        backend.files.scan(sbx, ROOTS)
    assert sbx.scan_state is None
    backend.files.scan(sbx, ROOTS)
    assert "since" not in channel.requests[-1] and sbx.scan_state is not None
    with pytest.raises(SandboxLost):
        backend.ping(sbx)
    assert sbx.scan_state is None and sbx.state == "lost"
    backend.destroy(sbx)
    assert sbx.scan_state is None


def test_a_rewrite_that_keeps_size_and_mtime_is_seen(agent: ModuleType, ws: Path) -> None:
    roots = list(limits.ROOTS)
    path = ws / "a.txt"
    token = scan(agent, roots)["token"]
    st = path.stat()
    path.write_bytes(bytes(reversed(path.read_bytes())))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime (as `cp -p` does)
    delta = scan(agent, roots, since=token)
    assert [r[4] for r in delta["changed"] if r[0] == str(path)] == [sha("\na")]


def test_entries_removed_while_walked_are_left_out(
    agent: ModuleType, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's processes run during a scan: a file renamed after its directory
    was listed, a symlink and a directory removed likewise, are not rows, and the
    rest of the walk goes on (it raised ``NotFound`` on the file before)."""
    roots = list(limits.ROOTS)
    w = limits.ROOTS[0]
    before = by_path(scan(agent, roots)["entries"])
    (ws / "a.txt").write_text("rewritten\n")  # read again by the next scan
    real_sha, real_listing = agent.sha256_of, agent.listing

    def vanishing_sha(path: str) -> str:
        if path.endswith("/a.txt"):
            os.rename(path, path + ".moved")
        return str(real_sha(path))

    def vanishing_listing(path: str, lent: list[tuple[str, int]]) -> Any:
        found = real_listing(path, lent)
        if path == w:
            (ws / "link").unlink()
            shutil.rmtree(ws / "d" / "e")
        return found

    monkeypatch.setattr(agent, "sha256_of", vanishing_sha)
    monkeypatch.setattr(agent, "listing", vanishing_listing)
    scan_module.HASHES.clear()  # every file is read again
    rows = by_path(scan(agent, roots)["entries"])
    gone = {f"{w}/a.txt", f"{w}/link", f"{w}/d/e", f"{w}/d/e/c.txt"}
    assert set(rows) == set(before) - gone
    assert rows[f"{w}/d/b.txt"] == before[f"{w}/d/b.txt"]


def test_a_listing_skips_what_is_gone(tmp_path: Path) -> None:
    from worker.agent.access import listing

    (tmp_path / "kept").write_text("k")
    assert listing(str(tmp_path / "no-such-dir"), []) == []
    assert [Path(p).name for p, _ in listing(str(tmp_path), [])] == ["kept"]
