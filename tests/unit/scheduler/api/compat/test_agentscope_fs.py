"""AgentScope's ``filesystem`` box: the server's texts (pure) and the tool routes (fake worker).

The real ``FilesystemSandbox`` client against a real grid is
``tests/integration/test_agentscope.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandgrid.models import FileEntry
from scheduler.api.compat import agentscope_fs_format as fmt
from scheduler.api.compat.agentscope_fs_tools import FS_TOOLS, MAX_PATHS
from tests.support.fakes import Grid


def _e(path: str, kind: str = "file", **kw: Any) -> FileEntry:
    return FileEntry(path=path, type=kind, **kw)  # type: ignore[arg-type]


TREE = [_e("a", "dir"), _e("a/x.txt"), _e("a/b", "dir"), _e("a/b/y.py"), _e("z.txt")]


def test_globs_match_as_the_servers_minimatch() -> None:
    assert fmt.glob_matches("*.txt", "z.txt") and not fmt.glob_matches("*.txt", "a/x.txt")
    assert fmt.glob_matches("**/*.txt", "a/x.txt") and fmt.glob_matches("**/*.txt", "z.txt")
    assert fmt.glob_matches("a/?/y.py", "a/b/y.py") and not fmt.glob_matches("a", "ab")
    assert fmt.excluded("a/b/y.py", ["b"]) and fmt.excluded("a/b", ["b"])
    assert not fmt.excluded("a/bb", ["b"]) and fmt.excluded("a/x.txt", ["*.txt", "q"]) is False
    assert fmt.excluded("a/x.txt", ["**/*.txt"])


def test_listing_and_tree_texts() -> None:
    assert fmt.listing_text(fmt.children(TREE, "a")) == "[DIR] a/b"[:5] + " b\n[FILE] x.txt"
    assert fmt.listing_text(fmt.children(TREE, ".")) == "[DIR] a\n[FILE] z.txt"
    tree = json.loads(fmt.tree_text(TREE, ".", ["y.py"]))
    assert tree == [
        {
            "name": "a",
            "type": "directory",
            "children": [{"name": "b", "type": "directory", "children": []},
                         {"name": "x.txt", "type": "file"}],
        },
        {"name": "z.txt", "type": "file"},
    ]  # fmt: skip
    assert fmt.tree_text(TREE, "a/b", []).startswith('[\n  {\n    "name": "y.py"')


def test_file_info_text() -> None:
    info = fmt.file_info_text(_e("f", size=5, mode=0o100644, mtime=0.0))
    assert info.splitlines() == [
        "size: 5",
        "created: Thu Jan 01 1970 00:00:00 GMT+0000 (Coordinated Universal Time)",
        "modified: Thu Jan 01 1970 00:00:00 GMT+0000 (Coordinated Universal Time)",
        "accessed: Thu Jan 01 1970 00:00:00 GMT+0000 (Coordinated Universal Time)",
        "isDirectory: false",
        "isFile: true",
        "permissions: 644",
    ]


def test_edits_replace_once_exactly_or_by_lines_and_answer_a_fenced_diff() -> None:
    after, diff = fmt.apply_edits("f.py", "a = 1\r\nb = 2\n", [("b = 2", "b = 3")])
    assert after == "a = 1\nb = 3\n"
    assert diff.startswith("```diff\nIndex: /workspace/f.py\n")
    assert "--- /workspace/f.py\toriginal" in diff and "-b = 2\n+b = 3\n" in diff
    assert diff.endswith("```\n\n")
    after, _ = fmt.apply_edits("f.py", "def f():\n    x = 1\n", [("x = 1", "x = 2")])
    assert after == "def f():\n    x = 2\n"
    after, _ = fmt.apply_edits(
        "f.py", "if a:\n    go()\n    more()\n", [("go()\nmore()", "stop()")]
    )
    assert after == "if a:\n    stop()\n"  # indentation-free match keeps the file's indent
    with pytest.raises(fmt.EditError, match="Could not find exact match"):
        fmt.apply_edits("f.py", "x", [("y", "z")])
    _, fenced = fmt.apply_edits("f.md", "```\n", [("```", "````")])
    assert fenced.startswith("`````diff\n")  # the fence outgrows the file's own


# ---- the routes, over the fake worker -------------------------------------------


def _box(grid: Grid) -> str:
    r = grid.http.post(
        "/create_from_pool", json={"sandbox_type": "filesystem"}, headers=grid.headers()
    )
    assert r.status_code == 200, r.text
    sid: str = r.json()["data"]
    return sid


def _call(grid: Grid, sid: str, tool: str, **arguments: Any) -> Any:
    body = {"identity": sid, "tool_name": tool, "arguments": arguments}
    return grid.http.post("/call_tool", json=body, headers=grid.headers())


def test_filesystem_box_lists_and_serves_the_servers_tools(grid: Grid) -> None:
    sid = _box(grid)
    r = grid.http.post("/list_tools", json={"identity": sid}, headers=grid.headers())
    tools = r.json()["data"]
    assert set(tools) == {"generic", "filesystem"} and set(tools["filesystem"]) == set(FS_TOOLS)
    schema = tools["filesystem"]["edit_file"]["json_schema"]["function"]["parameters"]
    assert {"path", "edits", "dryRun"} <= set(schema["properties"]) and "path" in schema["required"]
    edit = schema["properties"]["edits"]["items"]  # inlined: no $ref without its $defs
    assert set(edit["properties"]) == {"oldText", "newText"} and "$ref" not in str(schema)
    wrote = _call(grid, sid, "write_file", path="/workspace/n.txt", content="hi").json()["data"]
    assert wrote["isError"] is False and wrote["content"][0]["text"] == (
        "Successfully wrote to /workspace/n.txt"
    )
    read = _call(grid, sid, "read_file", path="n.txt").json()["data"]
    assert read["content"][0]["text"] == "hi"
    allowed = _call(grid, sid, "list_allowed_directories").json()["data"]
    assert allowed["content"][0]["text"] == "Allowed directories:\n/workspace"
    outside = _call(grid, sid, "read_file", path="/etc/passwd").json()["data"]
    assert outside["isError"] is True and outside["content"][0]["text"].startswith("Error: Access")


def test_filesystem_arguments_are_checked_and_bounded(grid: Grid) -> None:
    sid = _box(grid)
    r = _call(grid, sid, "read_file")
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "arguments.path"
    r = _call(grid, sid, "read_multiple_files", paths=["a"] * (MAX_PATHS + 1))
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "arguments.paths"
    r = _call(grid, sid, "read_file", path="a", head=1, tail=1)
    assert r.status_code == 422 and "at most one" in r.json()["error"]["message"]


def test_base_boxes_have_no_filesystem_tools(grid: Grid) -> None:
    r = grid.http.post("/create_from_pool", json={"sandbox_type": "base"}, headers=grid.headers())
    sid = r.json()["data"]
    tools = grid.http.post("/list_tools", json={"identity": sid}, headers=grid.headers()).json()
    assert set(tools["data"]) == {"generic"}
    answer = _call(grid, sid, "read_file", path="x").json()["data"]
    assert answer["isError"] is True and "not served" in answer["content"][0]["text"]
