"""Sandbox types as data (25.1): the model's rules, the types file, the quotas a type gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sandgrid.errors import InvalidInput, NotFound
from sandgrid.models import Quotas
from sandgrid.sandbox_types import SandboxTypeSpec, effective_quotas
from sandgrid.wire.catalog import Catalog, file_catalog
from sandgrid.wire.types_file import load_types_file, parse_types

SHIPPED = {
    "python": ("sandgrid/sandbox-python:latest", "runc"),
    "python-gvisor": ("sandgrid/sandbox-python:latest", "runsc"),
    "bfcl": ("sandgrid/sandbox-bfcl:latest", "runc"),
    "appworld": ("sandgrid/sandbox-appworld:latest", "runc"),
    "browser": ("sandgrid/sandbox-browser:latest", "runsc"),
}
#: The shipped templates (25.4): types of the file built from its template tables.
SHIPPED_TEMPLATES = {
    "node": ("sandgrid/sandbox-node:latest", "runc"),
    "devbox": ("sandgrid/sandbox-devbox:latest", "runc"),
}


def _spec(**kw: object) -> SandboxTypeSpec:
    return SandboxTypeSpec.model_validate({"name": "x", "image": "a/b:1", "runtime": "runc", **kw})


def test_the_shipped_types_are_the_files_entries_as_they_were_in_code() -> None:
    found = file_catalog().types
    assert {n: (t.image, t.runtime) for n, t in found.items()} == SHIPPED | SHIPPED_TEMPLATES
    for t in (found[n] for n in SHIPPED_TEMPLATES):  # one warm sandbox per node
        assert t.pool_size == 1 and t.tenant is None and not t.network_allowed
    for t in (found[n] for n in SHIPPED):  # nothing of what a session of them got changes
        assert t.quotas == {} and t.ceilings == {} and t.pool_size is None
        assert t.tenant is None and not t.network_allowed and t.default_network is None
        assert t.source == "file"


@pytest.mark.parametrize(
    ("fields", "where", "rule"),
    [
        ({"runtime": "kata"}, "runtime", "runtime must be one of runc, runsc"),
        ({"name": "Bad_Name"}, "name", "String should match pattern"),
        ({"quotas": {"memroy_mb": 1}}, "quotas", "'memroy_mb' is no quota"),
        ({"quotas": {"memory_mb": 8}}, "memory_mb", "greater than or equal to 32"),
        ({"quotas": {"memory_mb": 900}, "ceilings": {"memory_mb": 512}}, "", "above the type's"),
        ({"pool_size": 65}, "pool_size", "less than or equal to 64"),
        ({"pool_size": 3, "pool_max": 2}, "pool_max", "below pool_size 3 (the floor)"),
        ({"digest": "sha256:xyz"}, "digest", "String should match pattern"),
        ({"default_network": {"allow": ["pypi.org:443"]}}, "", "network_allowed = false"),
        ({"tenant": "A B"}, "tenant", "String should match pattern"),
    ],
)
def test_a_bad_definition_names_its_field_and_rule(
    fields: dict[str, object], where: str, rule: str
) -> None:
    with pytest.raises(ValidationError) as exc:
        _spec(**fields)
    first = exc.value.errors()[0]
    assert where in ".".join(str(p) for p in first["loc"]) + first["msg"]
    assert rule in first["msg"]


def test_the_types_file_refuses_a_bad_entry_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "types.toml"
    bad.write_text(
        '[[type]]\nname = "ok"\nimage = "a/b:1"\nruntime = "runc"\n'
        '[[type]]\nname = "two"\nimage = "a/b:1"\nruntime = "kata"\n'
    )
    with pytest.raises(InvalidInput, match=r"type\[1\]\.runtime: runtime must be") as exc:
        load_types_file(bad)
    assert exc.value.context["field"] == "type[1].runtime"
    with pytest.raises(InvalidInput, match=r"type\[1\]\.name: 'ok' is defined twice"):
        parse_types({"type": [{"name": "ok", "image": "a:1", "runtime": "runc"}] * 2})
    bad.write_text("[[type]\n")
    with pytest.raises(InvalidInput, match="not a TOML file"):
        load_types_file(bad)
    assert load_types_file(tmp_path / "absent.toml") == [] and load_types_file(None) == []


def test_a_types_defaults_fill_what_the_session_does_not_set() -> None:
    small = _spec(quotas={"memory_mb": 256, "cpus": 0.5})
    asked = Quotas.model_validate({"memory_mb": 384})
    got = effective_quotas(small, asked)
    assert got.memory_mb == 384 and got.cpus == 0.5 and got.pids == Quotas().pids
    plain = Quotas()
    assert effective_quotas(_spec(), plain) is plain  # no defaults: the very same quotas


def test_a_private_type_is_found_only_by_its_tenant() -> None:
    cat = Catalog([_spec(name="mine", tenant="acme"), _spec(name="all")])
    assert [t.name for t in cat.visible("acme")] == ["all", "mine"]
    assert [t.name for t in cat.visible("globex")] == ["all"]
    assert [t.name for t in cat.visible(None)] == ["all", "mine"]
    assert cat.find("mine", "acme", "t").name == "mine"
    with pytest.raises(NotFound) as theirs:
        cat.find("mine", "globex", "t")
    with pytest.raises(NotFound) as unknown:
        cat.find("nope", "globex", "t")
    assert "'mine'" in theirs.value.message and "mine" not in theirs.value.message.split(":")[-1]
    assert theirs.value.context["field"] == unknown.value.context["field"] == "type"
