"""The Kubernetes manifests are valid, checked offline against the schemas that
kubernetes-validate bundles (strict: an unknown field is an error)."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy_state import deploy_script, fake_state

MANIFESTS = sorted((Path(__file__).parents[2] / "deploy" / "k8s").glob("*.yaml"))
VERSION = "1.31.0"


def documents() -> list[tuple[str, dict[str, object]]]:
    found = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


def test_there_are_manifests() -> None:
    assert MANIFESTS and documents()


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_each_resource_is_valid(name: str, doc: dict[str, object]) -> None:
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_a_mistake_is_caught() -> None:
    doc = next(d for _, d in documents() if d["kind"] == "DaemonSet")
    broken = {**doc, "spec": {**doc["spec"], "replicas": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)


def _generated_secrets(tmp_path: Path) -> list[dict[str, object]]:
    fake_state(tmp_path)
    out = deploy_script("deploy/k8s/secrets.py", str(tmp_path))
    return [json.loads(doc) for doc in out.split("\n---\n")]


def _references(node: object) -> set[tuple[str, str]]:
    """(secret, key) pairs the manifests read (key '' for a whole secret)."""
    found: set[tuple[str, str]] = set()
    if isinstance(node, dict):
        if "secretKeyRef" in node:
            found.add((node["secretKeyRef"]["name"], node["secretKeyRef"]["key"]))
        if "secretRef" in node:
            found.add((node["secretRef"]["name"], ""))
        if "secretName" in node:
            keys = [i["key"] for i in node.get("items", [])] or [""]
            found |= {(node["secretName"], k) for k in keys}
        for v in node.values():
            found |= _references(v)
    elif isinstance(node, list):
        for v in node:
            found |= _references(v)
    return found


def test_generated_secrets_are_valid_and_cover_every_reference(tmp_path: Path) -> None:
    """23.19: the manifests ship no credential; deploy/k8s/secrets.py makes each one
    they read (the tenants file excepted: sandgrid-tenants is the operator's)."""
    made = _generated_secrets(tmp_path)
    for doc in made:
        kubernetes_validate.validate(doc, VERSION, strict=True)
    have = {(str(d["metadata"]["name"]), k) for d in made for k in d["stringData"]}  # type: ignore[index, union-attr]
    have |= {(name, "") for name, _ in have}
    wanted = set().union(*(_references(doc) for _, doc in documents()))
    assert wanted - have == {("sandgrid-tenants", "")}
    assert not any(d["kind"] == "Secret" for _, d in documents())  # none shipped
