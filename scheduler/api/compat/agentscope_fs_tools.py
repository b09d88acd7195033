"""AgentScope's ``filesystem`` sandbox tools, served by the grid's file ops.

``FilesystemSandbox`` (agentscope-runtime 1.1.6) calls, through ``call_tool``,
the eleven tools of the MCP filesystem server its image runs over
``/workspace``: ``read_file``, ``read_multiple_files``, ``write_file``,
``edit_file``, ``create_directory``, ``list_directory``, ``directory_tree``,
``move_file``, ``search_files``, ``get_file_info``, ``list_allowed_directories``.
Each is one or two turns of the session's file ops (read, write, list, stat,
mkdir, move), so paths are the grid's: absolute under ``/workspace`` or relative
to it, no symlink followed out. Answers are MCP ``CallToolResult`` objects with
the server's texts (``agentscope_fs_format``); a failure the server would
report (a missing file, a path outside the workspace, an edit that does not
match) is ``isError: true`` with ``Error: ...``, as the server answers it.
Arguments that fail their schema are 422 naming ``arguments.<field>`` (the
caller's ``call_tool`` validates them, as for the generic tools); the grid's own
trouble (busy, down, over quota) keeps its status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandgrid.errors import Conflict, InvalidInput, NotFound
from sandgrid.models import MAX_FILE_BYTES, FileList, FileRead, FileWrite, workspace_path
from sandgrid.ops import files as file_ops
from scheduler.api.compat import agentscope_fs_format as fmt
from scheduler.api.compat.agentscope_answers import tool_entry
from scheduler.api.deps import Services
from scheduler.tenants import Tenant

__all__ = [
    "FS_ARGS",
    "FS_TOOLS",
    "MAX_EDITS",
    "MAX_PATHS",
    "MAX_PATTERNS",
    "Edit",
    "EditArgs",
    "MoveArgs",
    "NoArgs",
    "PathArgs",
    "ReadArgs",
    "ReadManyArgs",
    "SearchArgs",
    "TreeArgs",
    "WriteArgs",
    "run_fs_tool",
]

#: Most files one ``read_multiple_files`` call may name.
MAX_PATHS = 256
#: Most edits one ``edit_file`` call may make.
MAX_EDITS = 256
#: Most ``excludePatterns`` one search or tree may give.
MAX_PATTERNS = 64
_PATH = 4096


class _Args(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class PathArgs(_Args):
    """``create_directory``, ``list_directory``, ``get_file_info``: one path."""

    path: str = Field(min_length=1, max_length=_PATH)


class ReadArgs(PathArgs):
    """``read_file``; ``head``/``tail`` (first or last N lines) as the server's newer form."""

    head: int | None = Field(None, ge=0)
    tail: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_end(self) -> ReadArgs:
        if self.head is not None and self.tail is not None:
            raise ValueError("head and tail: give at most one")
        return self


class ReadManyArgs(_Args):
    """``read_multiple_files``."""

    paths: list[str] = Field(min_length=1, max_length=MAX_PATHS)


class WriteArgs(PathArgs):
    """``write_file``."""

    content: str = Field(max_length=MAX_FILE_BYTES)


class Edit(_Args):
    """One edit of ``edit_file``: ``oldText`` (found exactly once) becomes ``newText``."""

    old_text: str = Field(alias="oldText", min_length=1, max_length=MAX_FILE_BYTES)
    new_text: str = Field(alias="newText", max_length=MAX_FILE_BYTES)


class EditArgs(PathArgs):
    """``edit_file``; ``dryRun`` answers the diff and writes nothing."""

    edits: list[Edit] = Field(min_length=1, max_length=MAX_EDITS)
    dry_run: bool = Field(False, alias="dryRun")


class TreeArgs(PathArgs):
    """``directory_tree``."""

    exclude_patterns: list[str] = Field(
        default_factory=list, alias="excludePatterns", max_length=MAX_PATTERNS
    )


class SearchArgs(TreeArgs):
    """``search_files``: a glob relative to ``path``."""

    pattern: str = Field(min_length=1, max_length=_PATH)


class MoveArgs(_Args):
    """``move_file``."""

    source: str = Field(min_length=1, max_length=_PATH)
    destination: str = Field(min_length=1, max_length=_PATH)


class NoArgs(_Args):
    """``list_allowed_directories``: no arguments."""


class _ToolError(Exception):
    """A failure the MCP server reports as an ``isError`` result."""


def _path(raw: str) -> str:
    try:
        return workspace_path(raw)
    except ValueError as exc:
        raise _ToolError(f"Access denied - path outside allowed directories: {raw}") from exc


class _Box:
    """One session's file ops, each failure the server's kind of error."""

    def __init__(self, svc: Services, tenant: Tenant, identity: str) -> None:
        self.svc, self.tenant, self.identity = svc, tenant, identity

    def op(self, op: Any, model: type[Any]) -> Any:
        try:
            return self.svc.runner.op(self.tenant, self.identity, op, model)
        except (InvalidInput, NotFound, Conflict) as exc:  # what the path is, not the grid
            raise _ToolError(exc.message) from exc

    def read(self, path: str) -> str:
        return str(self.op(file_ops.ReadOp(path=path), FileRead).content)

    def listed(self, path: str, *, recursive: bool) -> list[Any]:
        entries = self.op(file_ops.ListOp(path=path, recursive=recursive), FileList).entries
        if any(e.path == path and e.type != "dir" for e in entries):
            raise _ToolError(f"ENOTDIR: not a directory, scandir '{fmt.absolute(path)}'")
        return list(entries)

    def stat(self, path: str) -> Any:
        return self.op(file_ops.StatOp(path=path, follow=True), file_ops.StatResult).entry

    def write(self, path: str, content: str) -> None:
        self.op(
            file_ops.WriteOp(files=[FileWrite(path=path, content=content)]), file_ops.WriteResult
        )


def _read_file(box: _Box, a: ReadArgs) -> str:
    text = box.read(_path(a.path))
    if a.head is not None:
        return "".join(text.splitlines(keepends=True)[: a.head])
    if a.tail is not None:
        return "".join(text.splitlines(keepends=True)[-a.tail :] if a.tail else [])
    return text


def _read_many(box: _Box, a: ReadManyArgs) -> str:
    parts = []
    for raw in a.paths:
        try:
            parts.append(f"{raw}:\n{box.read(_path(raw))}\n")
        except _ToolError as exc:
            parts.append(f"{raw}: Error - {exc}")
    return "\n---\n".join(parts)


def _write_file(box: _Box, a: WriteArgs) -> str:
    box.write(_path(a.path), a.content)
    return f"Successfully wrote to {a.path}"


def _edit_file(box: _Box, a: EditArgs) -> str:
    path = _path(a.path)
    try:
        after, diff = fmt.apply_edits(
            path, box.read(path), [(e.old_text, e.new_text) for e in a.edits]
        )
    except fmt.EditError as exc:
        raise _ToolError(str(exc)) from exc
    if not a.dry_run:
        box.write(path, after)
    return diff


def _create_directory(box: _Box, a: PathArgs) -> str:
    box.op(file_ops.MkdirOp(path=_path(a.path)), file_ops.MkdirResult)
    return f"Successfully created directory {a.path}"


def _list_directory(box: _Box, a: PathArgs) -> str:
    path = _path(a.path)
    return fmt.listing_text(fmt.children(box.listed(path, recursive=False), path))


def _directory_tree(box: _Box, a: TreeArgs) -> str:
    path = _path(a.path)
    return fmt.tree_text(box.listed(path, recursive=True), path, a.exclude_patterns)


def _move_file(box: _Box, a: MoveArgs) -> str:
    src, dst = _path(a.source), _path(a.destination)
    try:
        box.stat(dst)
    except _ToolError:
        pass  # the destination is free
    else:
        raise _ToolError(f"EEXIST: file already exists, rename '{a.source}' -> '{a.destination}'")
    box.op(file_ops.MoveOp(source=src, destination=dst), file_ops.MoveResult)
    return f"Successfully moved {a.source} to {a.destination}"


def _search_files(box: _Box, a: SearchArgs) -> str:
    root = _path(a.path)
    skip = len(root) + 1 if root != "." else 0
    found = [
        fmt.absolute(e.path)
        for e in sorted(box.listed(root, recursive=True), key=lambda e: e.path)
        if e.path != root
        and fmt.glob_matches(a.pattern, e.path[skip:])
        and not fmt.excluded(e.path[skip:], a.exclude_patterns)
    ]
    return "\n".join(found) if found else "No matches found"


def _get_file_info(box: _Box, a: PathArgs) -> str:
    return fmt.file_info_text(box.stat(_path(a.path)))


def _allowed(box: _Box, a: NoArgs) -> str:
    return f"Allowed directories:\n{fmt.ROOT}"


_Tool = tuple[type[_Args], Callable[[_Box, Any], str], str]
_TOOLS: dict[str, _Tool] = {
    "read_file": (ReadArgs, _read_file, "Read the complete contents of a file as text."),
    "read_multiple_files": (ReadManyArgs, _read_many, "Read several files at once."),
    "write_file": (WriteArgs, _write_file, "Create or overwrite a file with new content."),
    "edit_file": (EditArgs, _edit_file, "Make line-based edits to a text file; a diff."),
    "create_directory": (PathArgs, _create_directory, "Create a directory (and parents)."),
    "list_directory": (PathArgs, _list_directory, "List a directory with [FILE]/[DIR]."),
    "directory_tree": (TreeArgs, _directory_tree, "A recursive tree of a directory as JSON."),
    "move_file": (MoveArgs, _move_file, "Move or rename a file or directory."),
    "search_files": (SearchArgs, _search_files, "Find paths matching a glob pattern."),
    "get_file_info": (PathArgs, _get_file_info, "Metadata of a file or directory."),
    "list_allowed_directories": (NoArgs, _allowed, "The directories the tools may access."),
}
#: Each tool's argument model (``call_tool`` validates arguments with it).
FS_ARGS: dict[str, type[BaseModel]] = {name: t[0] for name, t in _TOOLS.items()}


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema with its ``$ref``s replaced by their definitions (the runtime's
    ``list_tools`` carries ``properties`` alone, without ``$defs``)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            return _inlined(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inlined(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inlined(v, defs) for v in node]
    return node


def _schema(name: str, args: type[_Args], description: str) -> dict[str, Any]:
    schema = args.model_json_schema(by_alias=True)
    properties = _inlined(schema.get("properties", {}), schema.get("$defs", {}))
    return tool_entry(name, description, properties, schema.get("required", []))


#: The tools ``list_tools`` shows under ``filesystem`` (the MCP server's name in the image).
FS_TOOLS: dict[str, dict[str, Any]] = {n: _schema(n, t[0], t[2]) for n, t in _TOOLS.items()}


def _result(text: str, *, error: bool) -> dict[str, Any]:
    content = [{"type": "text", "text": text, "annotations": None}]
    return {"meta": None, "content": content, "isError": error}


def run_fs_tool(
    svc: Services, tenant: Tenant, identity: str, name: str, args: BaseModel
) -> dict[str, Any]:
    """Run one filesystem tool (``args`` validated by ``FS_ARGS[name]``); its MCP result."""
    box = _Box(svc, tenant, identity)
    try:
        return _result(_TOOLS[name][1](box, args), error=False)
    except _ToolError as exc:
        return _result(f"Error: {exc}", error=True)
