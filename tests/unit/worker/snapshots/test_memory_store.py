"""Memory images in the store: packed, named by their hash, verified, owned (issue 24.2)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from sandgrid.errors import SnapshotError
from sandgrid.wire.objects import LocalObjects, keys
from worker.snapshots.memchunks import CHUNK_BYTES, compress, decompress
from worker.snapshots.memory import (
    SWEEP_GRACE_S,
    MemoryMeta,
    MemoryRefused,
    MemoryStore,
)

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


def _big_image(tmp_path: Path, tail: bytes) -> Path:
    """Three chunks of pages that differ only in the last one."""
    image = tmp_path / "big"
    image.mkdir(exist_ok=True)
    (image / "checkpoint.img").write_bytes(b"kernel" * 1000)
    head = b"".join(i.to_bytes(4, "big") for i in range(2 * CHUNK_BYTES // 4))
    (image / "pages.img").write_bytes(head + tail)
    return image


def test_a_second_image_stores_only_the_chunks_that_changed(tmp_path: Path) -> None:
    store = MemoryStore(LocalObjects(tmp_path / "objects"), max_bytes=1 << 30)
    first = store.put(_big_image(tmp_path, b"one" * 1000), META)
    second = store.put(_big_image(tmp_path, b"two" * 1000), META)
    assert first.new_bytes == first.stored_bytes
    assert second.sha256 != first.sha256 and second.new_bytes < first.stored_bytes / 4
    out = tmp_path / "out"
    out.mkdir()
    store.fetch(META, second.sha256, out)
    assert (out / "pages.img").read_bytes().endswith(b"two" * 1000)


def test_a_fork_stores_the_pages_once_and_one_manifest_per_session(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    metas = [replace(META, session=f"f-{i}") for i in range(4)]
    stored = store.put_many(_big_image(tmp_path, b"x"), metas)
    assert len({s.sha256 for s in stored}) == 4
    assert sum(s.new_bytes for s in stored) < stored[0].stored_bytes + 4 * 1000
    for i, image in enumerate(stored):
        out = tmp_path / f"out{i}"
        out.mkdir()
        assert store.fetch(metas[i], image.sha256, out).session == f"f-{i}"
    with pytest.raises(MemoryRefused, match="another session"):  # f-0's is not f-1's
        data = objects.get(keys.memory_image_key("acme", "f-0", stored[0].sha256))
        objects.put(keys.memory_image_key("acme", "f-1", stored[0].sha256), data)
        store.fetch(metas[1], stored[0].sha256, tmp_path)


def test_a_changed_chunk_fails_verification(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    chunk = objects.list(keys.memory_chunks_prefix("acme"))[0]
    objects.put(chunk, b"garbage")
    with pytest.raises(MemoryRefused, match="fails verification"):
        store.fetch(META, stored.sha256, tmp_path)
    assert not objects.exists(chunk)  # deleted: the next pause stores it again
    again = store.put(_image(tmp_path), META)
    assert again.new_bytes > 0 and objects.exists(chunk)


def test_a_clone_shares_the_chunks_and_names_its_own_session(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    stored = store.put(_image(tmp_path), META)
    chunks = objects.list(keys.memory_chunks_prefix("acme"))
    to = replace(META, session="s-9", snapshot=None)
    clone = store.clone(META, stored.sha256, to)
    assert objects.list(keys.memory_chunks_prefix("acme")) == chunks
    assert store.fetch(to, clone.sha256, tmp_path).lineage == META.lineage
    with pytest.raises(MemoryRefused, match="another tenant"):
        store.clone(META, stored.sha256, replace(to, tenant="globex"))


def test_the_sweep_keeps_named_and_young_chunks_only(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30)
    one = store.put(_image(tmp_path), META)
    store.put(_big_image(tmp_path, b"kept"), replace(META, session="s-2"))
    before = len(objects.list(keys.memory_chunks_prefix("acme")))
    store.discard("acme", "s-1", one.sha256)
    assert store.sweep("acme") == 0  # young: a pause may be about to name them
    later = time.time() + SWEEP_GRACE_S + 1
    assert store.sweep("acme", now=later) == 1  # s-1's pages.img; checkpoint.img is shared
    assert len(objects.list(keys.memory_chunks_prefix("acme"))) == before - 1
