"""A type's image name and digest against the grid's registry (25.3)."""

from __future__ import annotations

import pytest

from sandgrid.errors import InvalidInput
from worker.images.refs import image_ref, in_registry

REG = "127.0.0.1:5000"
D = "sha256:" + "ab" * 32


def test_a_plain_name_maps_onto_the_registry_by_tag() -> None:
    ref = image_ref("sandgrid/sandbox-python:latest", REG)
    assert (ref.repository, ref.tag, ref.digest) == ("sandgrid/sandbox-python", "latest", None)
    assert ref.remote == f"{REG}/sandgrid/sandbox-python:latest"
    assert ref.local_names == ("sandgrid/sandbox-python:latest", ref.remote)


def test_with_a_digest_only_that_manifest_will_do() -> None:
    ref = image_ref("sandgrid/sandbox-python:latest", REG, D)
    assert ref.remote == f"{REG}/sandgrid/sandbox-python@{D}"
    assert ref.local_names == (ref.remote,)
    assert image_ref(f"sandgrid/sandbox-python@{D}", REG).remote == ref.remote


def test_a_name_without_a_tag_is_latest_and_the_registry_host_is_dropped() -> None:
    assert image_ref("sandgrid/x", REG).tag == "latest"
    ref = image_ref(f"{REG}/sandgrid/x:v2", REG)
    assert (ref.repository, ref.tag) == ("sandgrid/x", "v2")
    assert ref.local_names == (ref.remote,)


@pytest.mark.parametrize(
    ("image", "digest", "field"),
    [
        ("sandgrid/x:latest", "sha256:short", "image.digest"),
        ("sandgrid/x:latest", "md5:" + "a" * 32, "image.digest"),
        (f"sandgrid/x@{D}", "sha256:" + "cd" * 32, "image.digest"),
        ("docker.io/library/python:3", None, "image"),
        ("Sandgrid/X:latest", None, "image"),
        ("sandgrid/x:bad tag", None, "image"),
    ],
)
def test_bad_names_are_refused_naming_the_field(image: str, digest: str | None, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        image_ref(image, REG, digest)
    assert err.value.context["field"] == field
    assert err.value.http_status == 422


def test_in_registry_is_by_address() -> None:
    assert in_registry(f"{REG}/sandgrid/x:latest", REG)
    assert not in_registry("sandgrid/x:latest", REG)
    assert not in_registry("127.0.0.1:50000/sandgrid/x:latest", REG)
