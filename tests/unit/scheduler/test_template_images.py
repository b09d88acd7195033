"""A template ``from`` an image of the grid's registry, and a removed template's manifest (25.2):
the references split right, a missing image is 422 naming ``from``, a registry down is 503."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sandgrid.errors import InfrastructureError, InvalidInput
from sandgrid.templates import TemplateInfo
from sandgrid.wire.builds import final_event
from scheduler import template_images
from scheduler.template_images import drop_manifest, image_base, is_image_reference

REG = "127.0.0.1:5000"
DIGEST = "sha256:" + "c" * 64


class _Registry:
    """Answers HEAD/DELETE of manifests as a registry holding ``have`` (repo:tag)."""

    def __init__(self, have: set[str]) -> None:
        self.have = have
        self.asked: list[str] = []

    def head(self, url: str, **_: Any) -> httpx.Response:
        self.asked.append(url)
        repo, tag = url.split("/v2/", 1)[1].split("/manifests/")
        if f"{repo}:{tag}" in self.have:
            return httpx.Response(200, headers={"Docker-Content-Digest": DIGEST})
        return httpx.Response(404)

    def delete(self, url: str, **_: Any) -> httpx.Response:
        self.asked.append(url)
        return httpx.Response(202)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> _Registry:
    fake = _Registry({"sandgrid/sandbox-python:latest", "team/app:v2"})
    monkeypatch.setattr(template_images.httpx, "head", fake.head)
    monkeypatch.setattr(template_images.httpx, "delete", fake.delete)
    return fake


@pytest.mark.parametrize(
    ("ref", "image"),
    [
        (f"{REG}/sandgrid/sandbox-python:latest", "sandgrid/sandbox-python:latest"),
        ("sandgrid/sandbox-python", "sandgrid/sandbox-python:latest"),
        ("team/app:v2", "team/app:v2"),
    ],
)
def test_an_image_of_the_registry_is_a_base_by_its_digest(
    registry: _Registry, ref: str, image: str
) -> None:
    base = image_base(ref, REG, "tpl-x")
    assert (base.image, base.digest, base.runtime, base.name) == (image, DIGEST, "runsc", "tpl-x")


def test_a_type_name_is_no_image_reference() -> None:
    assert not is_image_reference("python-gvisor")
    assert is_image_reference("debian:bookworm") and is_image_reference("team/app")


@pytest.mark.parametrize(("ref", "registry_addr"), [("team/nope:v1", REG), ("team/app:v2", "")])
def test_an_image_the_registry_lacks_is_422_naming_from(
    registry: _Registry, ref: str, registry_addr: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        image_base(ref, registry_addr, "tpl-x")
    assert err.value.context["field"] == "from" and err.value.http_status == 422


def test_a_registry_that_cannot_be_reached_is_503(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(url: str, **_: Any) -> httpx.Response:
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(template_images.httpx, "head", down)
    with pytest.raises(InfrastructureError) as err:
        image_base("team/app:v2", REG, "tpl-x")
    assert err.value.code.value == "registry_unavailable"


def test_removing_deletes_the_manifest_by_digest(registry: _Registry) -> None:
    drop_manifest(f"{REG}/sandgrid/tpl-acme-x:abc123", DIGEST)
    assert registry.asked == [f"http://{REG}/v2/sandgrid/tpl-acme-x/manifests/{DIGEST}"]


def test_a_builds_last_event_names_its_step_and_exit_code_not_its_log() -> None:
    info = TemplateInfo(
        name="t",
        tenant="acme",
        base="python",
        build_id="a" * 16,
        state="failed",
        log="secret output",
        error="steps[1]: exited with 3",
        failed_step=1,
        exit_code=3,
    )
    event = final_event(info)
    assert event["type"] == "error" and "log" not in event["template"]  # type: ignore[operator]
    assert event["error"]["context"] == {"template": "t", "failed_step": 1, "exit_code": 3}  # type: ignore[index]
    ready = final_event(info.model_copy(update={"state": "ready"}))
    assert ready["type"] == "result" and "error" not in ready
