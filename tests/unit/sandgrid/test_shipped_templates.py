"""25.4: the types file's ``template`` tables (node, devbox) are checked, and rendered as
the Dockerfiles ``deploy/local/images.sh`` builds."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandgrid.errors import InvalidInput
from sandgrid.wire.types_file import parse_types

ROOT = Path(__file__).resolve().parents[3]
TYPES = ROOT / "deploy" / "types.toml"
BASE = {"name": "base", "image": "a/base:1", "runtime": "runc"}


def _renderer() -> ModuleType:
    path = ROOT / "deploy" / "local" / "shipped_templates.py"
    spec = importlib.util.spec_from_file_location("shipped_templates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["shipped_templates"] = module
    spec.loader.exec_module(module)
    return module


def _child(template: Any) -> dict[str, Any]:
    return {"name": "kid", "image": "a/kid:1", "runtime": "runc", "template": template}


def test_a_template_table_is_the_recipe_and_no_part_of_the_type() -> None:
    found = parse_types({"type": [BASE, _child({"from": "base", "steps": [{"run": "true"}]})]})
    assert [t.name for t in found] == ["base", "kid"]
    assert "template" not in found[1].model_dump()


@pytest.mark.parametrize(
    ("template", "field", "rule"),
    [
        ({"from": "nosuch", "steps": [{"run": "true"}]}, "type[1].template.from", "earlier type"),
        ({"from": "base", "steps": []}, "type[1].template.steps", "at least 1 item"),
        ({"from": "base", "steps": [{"rn": "x"}]}, "type[1].template.steps.0", ""),
        ({"steps": [{"run": "true"}]}, "type[1].template.from", "Field required"),
    ],
)
def test_a_bad_template_table_names_its_field(template: Any, field: str, rule: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_types({"type": [BASE, _child(template)]})
    assert err.value.context["field"].startswith(field)
    assert rule in str(err.value)


def test_a_template_cannot_be_its_own_or_a_later_types_child() -> None:
    later = _child({"from": "base", "steps": [{"run": "true"}]})
    with pytest.raises(InvalidInput, match="earlier type"):
        parse_types({"type": [later, BASE]})


def test_the_shipped_templates_render_parents_first_with_their_tools(tmp_path: Path) -> None:
    mod = _renderer()
    assert mod.shipped(TYPES) == ["node", "devbox"]
    tag, ctx = mod.render(TYPES, tmp_path, "node")
    node = (ctx / "Dockerfile").read_text()
    assert tag == "sandgrid/sandbox-node:latest"
    assert "FROM sandgrid/sandbox-python:latest" in node and "nodejs npm" in node
    assert "perm /6000" in node  # no setuid file, as the python image
    _, ctx = mod.render(TYPES, tmp_path, "devbox")
    devbox = (ctx / "Dockerfile").read_text()
    assert "FROM sandgrid/sandbox-node:latest" in devbox
    for tool in ("build-essential", "jq", "ripgrep"):
        assert tool in devbox
    assert all("USER" not in line for line in devbox.splitlines())  # the parent's user stays


def test_env_workdir_and_copy_steps_render(tmp_path: Path) -> None:
    types = tmp_path / "types.toml"
    types.write_text(
        '[[type]]\nname = "base"\nimage = "a/base:1"\nruntime = "runc"\n'
        '[[type]]\nname = "kid"\nimage = "a/kid:1"\nruntime = "runc"\n'
        '[type.template]\nfrom = "base"\nsteps = [{env = {A = "1 2"}}, {workdir = "/srv"},'
        ' {copy = {"/srv/x.txt" = "hi\\n"}}]\n'
    )
    parse_types(tomllib.loads(types.read_text()))  # the seeder takes it too
    _, ctx = _renderer().render(types, tmp_path / "out", "kid")
    text = (ctx / "Dockerfile").read_text()
    assert 'ENV A="1 2"' in text and "WORKDIR /srv" in text
    assert "COPY copy-2-0 /srv/x.txt" in text and (ctx / "copy-2-0").read_text() == "hi\n"
