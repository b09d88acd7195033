"""The Kubernetes manifests are valid, checked offline against the schemas that
kubernetes-validate bundles (strict: an unknown field is an error)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

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
