"""The pure half of AgentScope's ``filesystem`` tools: matching, edits and answer texts.

A ``FilesystemSandbox`` of agentscope-runtime 1.1.6 calls the tools of the MCP
filesystem server (``@modelcontextprotocol/server-filesystem``) that its image
runs over ``/workspace``. The grid serves them with its own file ops
(``scheduler.api.compat.agentscope_fs_tools``); this module turns what those
ops return into the texts that server answers, so an agent (or a prompt) that
parses them sees the same thing: ``[DIR] name`` / ``[FILE] name`` listings, a
JSON tree with 2-space indentation, ``key: value`` file info, a fenced
git-style diff for edits, ``Successfully ...`` confirmations. Paths here are
workspace-relative (``.`` is ``/workspace``), as the grid's ops report them.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
import stat
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sandgrid.models import FileEntry

__all__ = [
    "ROOT",
    "EditError",
    "absolute",
    "apply_edits",
    "children",
    "excluded",
    "file_info_text",
    "glob_matches",
    "listing_text",
    "tree_text",
]

#: The one directory the server may touch (``list_allowed_directories``).
ROOT = "/workspace"


class EditError(ValueError):
    """An edit whose ``oldText`` is not in the file (the server's own failure)."""


def absolute(path: str) -> str:
    """A workspace-relative path as the server prints it (absolute)."""
    return ROOT if path == "." else f"{ROOT}/{path}"


def _relative(path: str, root: str) -> str:
    return path if root == "." else path[len(root) + 1 :]


def children(entries: Iterable[FileEntry], root: str) -> list[FileEntry]:
    """The entries directly inside ``root``, by name."""
    return sorted(
        (e for e in entries if e.path != root and posixpath.dirname(e.path) == _parent(root)),
        key=lambda e: e.path,
    )


def _parent(root: str) -> str:
    return "" if root == "." else root


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as the server's (minimatch, ``dot: true``): ``*`` and ``?`` stay
    within one path segment, ``**`` spans segments."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_matches(pattern: str, relative: str) -> bool:
    """Whether a path relative to the search root matches a glob."""
    return _glob_regex(pattern).match(relative) is not None


def excluded(relative: str, patterns: Sequence[str]) -> bool:
    """An exclude pattern matches the path, or (without ``*``) any segment run of it."""
    for pattern in patterns:
        forms = [pattern] if "*" in pattern else [pattern, f"**/{pattern}", f"**/{pattern}/**"]
        if any(glob_matches(form, relative) for form in forms):
            return True
    return False


def listing_text(entries: Sequence[FileEntry]) -> str:
    """``list_directory``'s answer: one ``[DIR] name`` or ``[FILE] name`` a line."""
    return "\n".join(
        f"{'[DIR]' if e.type == 'dir' else '[FILE]'} {posixpath.basename(e.path)}" for e in entries
    )


def tree_text(entries: Sequence[FileEntry], root: str, exclude: Sequence[str]) -> str:
    """``directory_tree``'s answer: nested ``name``/``type``/``children`` as 2-space JSON."""
    by_parent: dict[str, list[FileEntry]] = {}
    for e in sorted(entries, key=lambda e: e.path):
        if e.path != root:
            by_parent.setdefault(posixpath.dirname(e.path), []).append(e)

    def level(parent: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for e in by_parent.get(parent, []):
            if excluded(_relative(e.path, root), exclude):
                continue
            node: dict[str, Any] = {
                "name": posixpath.basename(e.path),
                "type": "directory" if e.type == "dir" else "file",
            }
            if e.type == "dir":
                node["children"] = level(e.path)
            out.append(node)
        return out

    return json.dumps(level(_parent(root)), indent=2)


def _js_date(ts: float) -> str:
    """A time as JavaScript's ``Date.toString()`` prints it (the server's host is UTC)."""
    when = datetime.fromtimestamp(ts, UTC)
    return when.strftime("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)")


def file_info_text(entry: FileEntry) -> str:
    """``get_file_info``'s ``key: value`` lines. The grid keeps one time (mtime): it
    stands for created and accessed too."""
    when = _js_date(entry.mtime)
    rows = {
        "size": entry.size,
        "created": when,
        "modified": when,
        "accessed": when,
        "isDirectory": str(entry.type == "dir").lower(),
        "isFile": str(entry.type == "file").lower(),
        "permissions": oct(stat.S_IMODE(entry.mode))[2:],
    }
    return "\n".join(f"{k}: {v}" for k, v in rows.items())


def _replace(text: str, old: str, new: str) -> str:
    """``old`` replaced once: exactly, else line by line ignoring indentation
    (the new lines take the first old line's indentation)."""
    if old in text:
        return text.replace(old, new, 1)
    lines, wanted = text.split("\n"), old.split("\n")
    for i in range(len(lines) - len(wanted) + 1):
        window = lines[i : i + len(wanted)]
        if all(a.strip() == b.strip() for a, b in zip(window, wanted, strict=True)):
            indent = window[0][: len(window[0]) - len(window[0].lstrip())]
            fresh = [indent + line.lstrip() for line in new.split("\n")]
            return "\n".join(lines[:i] + fresh + lines[i + len(wanted) :])
    raise EditError(f"Could not find exact match for edit:\n{old}")


def apply_edits(path: str, original: str, edits: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The file after ``edits`` (line endings as ``\\n``) and the fenced diff the server answers.

    Raises:
        EditError: an edit's old text is not in the file.
    """
    before = original.replace("\r\n", "\n")
    after = before
    for old, new in edits:
        after = _replace(after, old.replace("\r\n", "\n"), new.replace("\r\n", "\n"))
    shown = absolute(path)
    body = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{shown}\toriginal",
            tofile=f"{shown}\tmodified",
        )
    )
    diff = f"Index: {shown}\n{'=' * 67}\n{body}"
    fence = "```"
    while fence in diff:
        fence += "`"
    return after, f"{fence}diff\n{diff}{fence}\n\n"
