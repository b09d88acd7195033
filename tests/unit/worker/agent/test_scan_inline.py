"""A scan carries the small files it read (``inline``), and the snapshot takes them
instead of a ``pack`` only when they hash to what the scan said (issue 22.2)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandgrid.errors import SandboxError
from tests.unit.worker.agent.test_scan import ROOTS, ScriptedChannel, sandbox, stub_manager
from worker.agent import limits, main
from worker.sandboxes.files import SCAN_INLINE_BYTES
from worker.sandboxes.scan import inline_of
from worker.snapshots.format.entries import Entry
from worker.snapshots.sync import _pack

TOO_MUCH = b"x" * (limits.MAX_SCAN_INLINE + 1)


def scan(roots: list[str], **fields: Any) -> dict[str, Any]:
    reply = json.loads(json.dumps(main.handle({"id": 1, "op": "scan", "roots": roots, **fields})))
    assert reply["ok"], reply
    return dict(reply["result"])


def decoded(reply: dict[str, Any]) -> dict[str, bytes]:
    return {p: base64.b64decode(t) for p, t in reply.get("inline", {}).items()}


def test_a_scan_carries_the_files_it_read_within_its_budget(agent: ModuleType, ws: Path) -> None:
    w = limits.ROOTS[0]
    first = scan([w], inline=64)
    assert decoded(first) == {
        f"{w}/a.txt": b"a\n",
        f"{w}/d/b.txt": b"b\n",
        f"{w}/d/e/c.txt": b"c\n",
        f"{w}/ro.txt": b"ro\n",
    }
    (ws / "a.txt").write_text("a\nmore\n")
    (ws / "big.bin").write_bytes(b"x" * 100)
    delta = scan([w], since=first["token"], inline=64)
    assert decoded(delta) == {f"{w}/a.txt": b"a\nmore\n"}  # big.bin is past the budget
    assert {r[0] for r in delta["changed"]} == {f"{w}/a.txt", f"{w}/big.bin"}
    quiet = scan([w], since=delta["token"], inline=64)
    assert "inline" not in quiet  # nothing read, nothing carried
    assert "inline" not in scan([w])  # not asked for


@pytest.mark.parametrize("bad", [-1, limits.MAX_SCAN_INLINE + 1, "64", True, 1.5])
def test_an_inline_budget_out_of_range_is_refused_naming_the_field(
    agent: ModuleType, ws: Path, bad: Any
) -> None:
    reply = main.handle({"id": 1, "op": "scan", "roots": [limits.ROOTS[0]], "inline": bad})
    assert reply["ok"] is False
    assert reply["error"]["code"] == "invalid_input" and "inline" in reply["error"]["message"]


@pytest.mark.parametrize(
    "bad",
    [
        {"inline": ["x"]},
        {"inline": {"/workspace/f": 3}},
        {"inline": {"/workspace/f": "not base64!"}},
        {"inline": {"/workspace/f": base64.b64encode(TOO_MUCH).decode()}},
    ],
    ids=["not-a-map", "not-text", "not-base64", "too-much"],
)
def test_malformed_inline_is_a_scan_error(bad: dict[str, Any]) -> None:
    with pytest.raises(SandboxError, match="malformed scan reply"):
        inline_of(bad)


def entry(path: str, data: bytes) -> Entry:
    return Entry(path, "file", 0o644, len(data), hashlib.sha256(data).hexdigest(), None)


class _Draft:
    def __init__(self, *entries: Entry) -> None:
        self.need = {e.sha256: e for e in entries}


def test_the_worker_asks_for_inline_bytes_and_the_snapshot_takes_only_verified_ones() -> None:
    new, stale = b"new line\n", b"old"
    channel = ScriptedChannel(
        {
            "token": "t1",
            "entries": [],
            "inline": {
                "/workspace/a": base64.b64encode(new).decode(),
                "/workspace/b": base64.b64encode(stale).decode(),
            },
        },
    )
    backend, sbx = stub_manager(), sandbox(channel)
    backend.files.scan(sbx, ROOTS)
    assert channel.requests[0]["inline"] == SCAN_INLINE_BYTES
    packed: list[list[str]] = []

    def pack(_sbx: Any, paths: list[str]) -> bytes:
        packed.append(paths)
        raise SandboxError("packed")  # only b, whose carried bytes are not its content

    backend.files.pack = pack  # type: ignore[method-assign,assignment]
    a, b = entry("/workspace/a", new), entry("/workspace/b", b"new")
    with pytest.raises(SandboxError, match="packed"):
        _pack(backend.files, sbx, _Draft(a, b))  # type: ignore[arg-type]
    assert packed == [["/workspace/b"]]
    assert sbx.scan_inline == {}  # handed over once
    assert _pack(backend.files, sbx, _Draft()) == {}  # type: ignore[arg-type]


def test_a_snapshot_of_carried_files_asks_no_pack() -> None:
    data = b"appended\n"
    channel = ScriptedChannel(
        {"token": "t1", "entries": [], "inline": {"/workspace/a": base64.b64encode(data).decode()}}
    )
    backend, sbx = stub_manager(), sandbox(channel)
    backend.files.scan(sbx, ROOTS)
    a = entry("/workspace/a", data)
    contents = _pack(backend.files, sbx, _Draft(a))  # type: ignore[arg-type]
    assert contents == {a.sha256: data}
    assert len(channel.requests) == 1  # the scan alone
