"""Memory images in the store: packed, named by their hash, verified, owned (issue 24.2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgrid.errors import SnapshotError
from sandgrid.wire.objects import LocalObjects, keys
from worker.snapshots.memory import MemoryMeta, MemoryRefused, MemoryStore, compress, decompress

META = MemoryMeta("acme", "s-1", "000000000001-aaaaaaaaaaaa", "python-gvisor", "runsc", ("c1",))


def _image(tmp_path: Path) -> Path:
    image = tmp_path / "image"
    image.mkdir(exist_ok=True)
    (image / "checkpoint.img").write_bytes(b"kernel" * 1000)
    (image / "pages.img").write_bytes(bytes(200_000))
    return image


def test_an_image_comes_back_whole_with_its_record(tmp_path: Path) -> None:
    store = MemoryStore(LocalObjects(tmp_path / "objects"), max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    assert stored.raw_bytes == 206_000 and stored.stored_bytes < stored.raw_bytes / 10
    out = tmp_path / "out"
    out.mkdir()
    assert store.fetch(META, stored.sha256, out) == META
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.img", "pages.img"]
    assert (out / "pages.img").read_bytes() == bytes(200_000)


def test_changed_bytes_fail_verification(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    objects.put(keys.memory_image_key("acme", "s-1", stored.sha256), b"garbage")
    with pytest.raises(MemoryRefused, match="fails verification"):
        store.fetch(META, stored.sha256, tmp_path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("session", "s-2"), ("snapshot", "000000000002-bbbbbbbbbbbb"), ("runtime", "runc")],
)
def test_an_image_of_another_owner_is_refused(tmp_path: Path, field: str, value: str) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    want = MemoryMeta(**{**META.__dict__, field: value})
    data = objects.get(keys.memory_image_key("acme", "s-1", stored.sha256))
    objects.put(keys.memory_image_key("acme", want.session, stored.sha256), data)
    with pytest.raises(MemoryRefused, match=f"another {field}"):
        store.fetch(want, stored.sha256, tmp_path)


def test_another_tenants_key_holds_nothing(tmp_path: Path) -> None:
    store = MemoryStore(LocalObjects(tmp_path / "objects"), max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    other = MemoryMeta(**{**META.__dict__, "tenant": "globex"})
    with pytest.raises(MemoryRefused, match="not in the store"):
        store.fetch(other, stored.sha256, tmp_path)


def test_an_image_over_the_limit_is_refused_and_not_stored(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    with pytest.raises(SnapshotError, match="larger than the limit"):
        MemoryStore(objects, max_bytes=1000).put(_image(tmp_path), META)
    assert objects.list(keys.memory_prefix("acme", "s-1")) == []


def test_used_images_are_discarded_and_dropped(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    one = store.put(_image(tmp_path), META)
    store.discard("acme", "s-1", one.sha256)
    assert objects.list(keys.memory_prefix("acme", "s-1")) == []
    store.put(_image(tmp_path), META)
    assert store.drop("acme", "s-1") == 1


def test_both_packings_read_back_and_anything_else_is_refused() -> None:
    import gzip

    assert decompress(compress(b"pages" * 100)) == b"pages" * 100
    assert decompress(gzip.compress(b"older")) == b"older"
    with pytest.raises((ValueError, OSError)):
        decompress(b"neither")
