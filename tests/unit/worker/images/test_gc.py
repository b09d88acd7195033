"""collect_images: the registry's images no type names and no container uses go (25.3)."""

from __future__ import annotations

from tests.unit.worker.images.fakes import FakeEngine
from worker.images.engine import LocalImage
from worker.images.gc import collect_images

REG = "127.0.0.1:5000"
D1, D2 = "sha256:" + "11" * 32, "sha256:" + "22" * 32


def engine_with(*images: LocalImage, used: set[str] | None = None) -> FakeEngine:
    engine = FakeEngine()
    engine.local = list(images)
    engine.used = used or set()
    return engine


def test_an_unreferenced_pulled_image_goes_by_its_digest() -> None:
    old = LocalImage("sha256:old", (), (f"{REG}/sandgrid/x@{D1}",))
    kept = LocalImage("sha256:new", (), (f"{REG}/sandgrid/x@{D2}",))
    engine = engine_with(old, kept)
    assert collect_images(engine, REG, [("sandgrid/x:latest", D2)]) == [f"{REG}/sandgrid/x@{D1}"]


def test_an_image_a_container_uses_stays() -> None:
    busy = LocalImage("sha256:busy", (), (f"{REG}/sandgrid/x@{D1}",))
    assert collect_images(engine_with(busy, used={"sha256:busy"}), REG, []) == []


def test_images_not_from_the_registry_are_left_alone() -> None:
    mine = LocalImage("sha256:mine", ("sandgrid/debian-base:bookworm",), ())
    assert collect_images(engine_with(mine), REG, []) == []


def test_a_built_image_loses_only_its_registry_tag() -> None:
    built = LocalImage(
        "sha256:built",
        ("sandgrid/sandbox-old:latest", f"{REG}/sandgrid/sandbox-old:latest"),
        (f"{REG}/sandgrid/sandbox-old@{D1}",),
    )
    engine = engine_with(built)
    assert collect_images(engine, REG, []) == [f"{REG}/sandgrid/sandbox-old:latest"]


def test_a_type_naming_a_tag_keeps_the_image_of_that_tag() -> None:
    tagged = LocalImage("sha256:t", (f"{REG}/sandgrid/x:latest",), (f"{REG}/sandgrid/x@{D1}",))
    assert collect_images(engine_with(tagged), REG, [("sandgrid/x:latest", None)]) == []
    built = LocalImage("sha256:b", ("sandgrid/x:latest", f"{REG}/sandgrid/x:latest"), ())
    assert collect_images(engine_with(built), REG, [("sandgrid/x:latest", None)]) == []
