"""The node's cache of unpacked memory chunks: hits, refused entries, the bound (24.4)."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from sandgrid.errors import InvalidInput
from sandgrid.wire.objects import LocalObjects, keys
from tests.support.memory_images import memory_image
from worker.snapshots.memcache import ChunkCache
from worker.snapshots.memchunks import Chunk
from worker.snapshots.memory import MemoryMeta, MemoryRefused, MemoryStore

RAW = [bytes([i]) * 1000 for i in range(4)]


def _chunk(raw: bytes) -> Chunk:
    return Chunk(hashlib.sha256(b"stored" + raw).hexdigest(), 10, len(raw))


class _Store:
    """A fetch that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def fetch(self, raw: bytes, *, delay: float = 0.0) -> bytes:
        self.calls.append(raw)
        time.sleep(delay)
        return raw


def test_a_second_restore_reads_the_chunk_from_the_cache(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    for _ in range(3):
        assert cache.get("acme", _chunk(RAW[0]), lambda: store.fetch(RAW[0])) == RAW[0]
    assert store.calls == [RAW[0]]
    assert (cache.stats["hits"], cache.stats["fetched"]) == (2, 1)


def test_a_corrupt_entry_is_refused_and_fetched_again(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    chunk = _chunk(RAW[0])
    cache.get("acme", chunk, lambda: store.fetch(RAW[0]))
    cache.flush()
    (entry,) = (p for p in (tmp_path / "c" / "acme").iterdir())
    entry.write_bytes(b"\xff" * len(RAW[0]))  # same length, other bytes
    assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    assert len(store.calls) == 2 and cache.stats["refused"] == 1
    cache.flush()
    entry.write_bytes(RAW[0][:10])  # truncated
    assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    cache.flush()
    entry.unlink()  # gone
    assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    assert len(store.calls) == 4 and cache.stats["refused"] == 3
    cache.flush()
    assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    assert len(store.calls) == 4  # the refetched copy is kept and verifies


def test_the_cache_holds_at_most_its_bound_evicting_the_least_recently_used(
    tmp_path: Path,
) -> None:
    cache, store = ChunkCache(tmp_path / "c", 2500), _Store()
    for raw in RAW[:2]:
        cache.get("acme", _chunk(raw), lambda raw=raw: store.fetch(raw))
    cache.flush()
    cache.get("acme", _chunk(RAW[0]), lambda: store.fetch(RAW[0]))  # 0 used last: 1 goes
    cache.get("acme", _chunk(RAW[2]), lambda: store.fetch(RAW[2]))
    cache.flush()
    on_disk = sum(p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert cache.size == on_disk == 2000 and cache.stats["evicted"] == 1
    store.calls.clear()
    cache.get("acme", _chunk(RAW[0]), lambda: store.fetch(RAW[0]))
    cache.get("acme", _chunk(RAW[1]), lambda: store.fetch(RAW[1]))
    assert store.calls == [RAW[1]]  # 0 was kept, 1 was evicted
    cache.flush()
    assert cache.size <= 2500


def test_a_chunk_larger_than_the_bound_is_not_kept(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 500), _Store()
    for _ in range(2):
        assert cache.get("acme", _chunk(RAW[0]), lambda: store.fetch(RAW[0])) == RAW[0]
        cache.flush()
    assert len(store.calls) == 2 and cache.size == 0


def test_another_tenant_never_gets_the_chunk(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    chunk = _chunk(RAW[0])
    cache.get("acme", chunk, lambda: store.fetch(RAW[0]))
    assert cache.get("other", chunk, lambda: store.fetch(RAW[1])) == RAW[1]
    assert len(store.calls) == 2
    with pytest.raises(InvalidInput):
        cache.get("../acme", chunk, lambda: store.fetch(RAW[0]))


def test_restores_at_once_fetch_a_chunk_once(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    chunk, got = _chunk(RAW[0]), []
    threads = [
        threading.Thread(
            target=lambda: got.append(
                cache.get("acme", chunk, lambda: store.fetch(RAW[0], delay=0.2))
            )
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [RAW[0]] * 4 and len(store.calls) == 1


def test_a_failed_fetch_is_not_kept_and_the_next_restore_fetches(tmp_path: Path) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()

    def broken() -> bytes:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        cache.get("acme", _chunk(RAW[0]), broken)
    assert cache.get("acme", _chunk(RAW[0]), lambda: store.fetch(RAW[0])) == RAW[0]
    cache.flush()
    assert store.calls == [RAW[0]] and cache.size == len(RAW[0])


def test_entries_an_earlier_process_left_are_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "c" / "acme").mkdir(parents=True)
    chunk = _chunk(RAW[0])
    (tmp_path / "c" / "acme" / chunk.sha256).write_bytes(RAW[1])
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    assert store.calls == [RAW[0]]


META = MemoryMeta("acme", "f-1", None, "python-gvisor", "runsc")


def test_forks_restored_on_one_node_fetch_each_chunk_once(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    source = MemoryStore(objects, max_bytes=1 << 30)  # the fork's source: another node
    store = MemoryStore(objects, max_bytes=1 << 30, cache=ChunkCache(tmp_path / "c", 1 << 30))
    metas = [MemoryMeta("acme", f"f-{i}", None, "python-gvisor", "runsc") for i in range(3)]
    stored = source.put_many(memory_image(tmp_path), metas)
    counts = []
    for i, (meta, image) in enumerate(zip(metas, stored, strict=True)):
        out = tmp_path / f"out-{i}"
        out.mkdir()
        counts.append(store.fetch_counted(meta, image.sha256, out)[1])
        assert (out / "pages.img").read_bytes() == (tmp_path / "image" / "pages.img").read_bytes()
    assert counts[0] == 3 and counts[1:] == [0, 0]  # 2 chunks of pages, 1 of kernel


def test_a_chunk_changed_in_the_store_is_still_refused_with_a_cache(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    store = MemoryStore(objects, max_bytes=1 << 30, cache=ChunkCache(tmp_path / "c", 1 << 30))
    stored = store.put(memory_image(tmp_path), META)
    for key in objects.list(keys.memory_chunks_prefix("acme")):
        objects.put(key, b"garbage")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(MemoryRefused, match="fails verification"):
        store.fetch(META, stored.sha256, out)


def test_a_forks_source_node_keeps_the_pages_it_packed(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    cache = ChunkCache(tmp_path / "c", 1 << 30)
    store = MemoryStore(objects, max_bytes=1 << 30, cache=cache)
    metas = [MemoryMeta("acme", f"f-{i}", None, "python-gvisor", "runsc") for i in range(2)]
    stored = store.put_many(memory_image(tmp_path), metas)
    assert cache.stats["kept"] == 3
    out = tmp_path / "out"
    out.mkdir()
    assert store.fetch_counted(metas[1], stored[1].sha256, out)[1] == 0  # all from here
    assert (out / "pages.img").read_bytes() == (tmp_path / "image" / "pages.img").read_bytes()
    other = ChunkCache(tmp_path / "c2", 1 << 30)
    MemoryStore(objects, max_bytes=1 << 30, cache=other).put(tmp_path / "image", META)
    assert other.stats["kept"] == 0 and other.size == 0  # a pause (one session) keeps nothing


def test_no_restore_waits_for_the_cache_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, store = ChunkCache(tmp_path / "c", 1 << 20), _Store()
    disk = threading.Event()
    real_put = cache._put
    monkeypatch.setattr(cache, "_put", lambda key, raw: (disk.wait(5), real_put(key, raw)))
    chunk = _chunk(RAW[0])
    for _ in range(2):  # the disk holds nothing yet: the second takes the first's bytes
        assert cache.get("acme", chunk, lambda: store.fetch(RAW[0])) == RAW[0]
    assert len(store.calls) == 1 and cache.size == 0 and cache.stats["hits"] == 1
    disk.set()
    cache.flush()
    assert cache.size == len(RAW[0])
