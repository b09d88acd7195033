"""Render the types file's shipped templates as Dockerfiles (issue 25.4; images.sh runs it).

A ``[[type]]`` of ``deploy/types.toml`` with a ``template`` table (``from`` a
type of the same file, ``steps`` as a template's: ``run``, ``env``,
``workdir``, ``copy``) is a shipped environment built here, on the operator's
machine, by ``docker build`` of its rendered Dockerfile: the steps are ours,
so they may use the host's network (Debian's archive), which a tenant's build
never gets (docs/decisions.md, "Shipped templates are built at make up").

    shipped_templates.py TYPES_FILE                 the names of such types, in file order
    shipped_templates.py TYPES_FILE OUT_DIR NAME    render NAME; print ``IMAGE DIR``

The second form writes ``OUT_DIR/<name>/Dockerfile`` (and the ``copy``
files). A template's ``from`` must be an earlier entry of the file, so file
order is parents first; images.sh renders each one after its parent is
built, since the parent's image id is written into the Dockerfile: a rebuilt
parent changes the child's input hash (images.sh rebuilds on a changed hash).
Standard library only: it runs before anything else of the grid is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["main", "render", "shipped"]

#: What every shipped image ends with, as images/sandbox-python does: no setuid file.
_NO_SETUID = (
    "RUN find / -xdev -perm /6000 -type f -exec chmod a-s {} + "
    '&& test -z "$(find / -xdev -perm /6000 -type f)"'
)


def _image_id(image: str) -> str:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", image],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "absent"


def _step_lines(i: int, step: dict[str, Any], ctx: Path) -> list[str]:
    """The Dockerfile lines of one step (``copy`` files written into ``ctx``)."""
    if "run" in step:
        return ["RUN " + step["run"].strip().replace("\n", " \\\n    ")]
    if "env" in step:
        return ["ENV " + " ".join(f"{k}={json.dumps(v)}" for k, v in step["env"].items())]
    if "workdir" in step:
        return [f"RUN mkdir -p {step['workdir']}", f"WORKDIR {step['workdir']}"]
    if "copy" in step:
        lines = []
        for j, (path, text) in enumerate(step["copy"].items()):
            name = f"copy-{i}-{j}"
            (ctx / name).write_text(text)
            lines.append(f"COPY {name} {path}")
        return lines
    raise SystemExit(f"step {i}: one of run, env, workdir, copy")


def _entries(types_file: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = tomllib.loads(types_file.read_text()).get("type", [])
    return entries


def shipped(types_file: Path) -> list[str]:
    """The names of the types with a ``template`` table, in file order (parents first)."""
    return [e["name"] for e in _entries(types_file) if "template" in e]


def render(types_file: Path, out: Path, name: str) -> tuple[str, Path]:
    """The image of shipped template ``name`` and its rendered build context."""
    entries = _entries(types_file)
    earlier: dict[str, str] = {}
    for entry in entries:
        if entry["name"] == name:
            break
        earlier[entry["name"]] = entry["image"]
    else:
        raise SystemExit(f"no type {name!r} in {types_file}")
    template = entry.get("template")
    if template is None:
        raise SystemExit(f"type {name}: no template table")
    parent = earlier.get(template["from"])
    if parent is None:
        raise SystemExit(f"type {name}: template.from {template['from']!r} is no earlier type")
    ctx = out / name
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    lines = [
        f"# type {name}, rendered from {types_file.name} (do not edit)",
        f"# parent {parent} {_image_id(parent)}",
        f"FROM {parent}",
    ]
    for i, step in enumerate(template["steps"]):
        lines += _step_lines(i, step, ctx)
    lines += [_NO_SETUID, f"LABEL sandgrid.image={name}"]
    (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
    return entry["image"], ctx


def main(argv: list[str]) -> int:
    """The names (one argument), or render one (three): see the module's docstring."""
    if len(argv) == 1:
        print("\n".join(shipped(Path(argv[0]))))
        return 0
    if len(argv) == 3:
        image, ctx = render(Path(argv[0]), Path(argv[1]), argv[2])
        print(image, ctx)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
