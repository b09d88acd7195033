"""Memory chunks cut by content (24.4): pieces end on pages chosen by their bytes, so
pages that moved in a second checkpoint still make the same chunks."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path

from sandgrid.wire.objects import LocalObjects
from worker.snapshots.memchunks import (
    CHUNK_BYTES,
    MIN_CHUNK_BYTES,
    PAGE_BYTES,
    cut_points,
)
from worker.snapshots.memory import MemoryMeta, MemoryStore

META = MemoryMeta("acme", "s-1", None, "python-gvisor", "runsc")


def _pages(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n * PAGE_BYTES)


def _hashes(data: bytes) -> set[str]:
    return {hashlib.sha256(data[s : s + n]).hexdigest() for s, n in cut_points(data)}


def test_pieces_cover_the_data_on_page_boundaries_within_the_bounds() -> None:
    data = _pages(6000) + b"tail"  # ~23 MiB and a partial page
    cuts = list(cut_points(data))
    assert cuts[0][0] == 0 and sum(n for _, n in cuts) == len(data)
    assert all(s + n == t for (s, n), (t, _) in itertools.pairwise(cuts))
    assert all(s % PAGE_BYTES == 0 for s, _ in cuts)
    assert all(MIN_CHUNK_BYTES <= n <= CHUNK_BYTES for _, n in cuts[:-1])
    assert 0 < cuts[-1][1] <= CHUNK_BYTES


def test_pages_of_one_value_are_cut_at_the_longest_piece() -> None:
    cuts = list(cut_points(bytes(3 * CHUNK_BYTES)))  # no page ever ends a piece by content
    assert [n for _, n in cuts] == [CHUNK_BYTES] * 3


def test_small_and_empty_data() -> None:
    assert list(cut_points(b"")) == []
    assert list(cut_points(b"kernel")) == [(0, 6)]


def test_pages_moved_by_a_few_pages_make_the_same_chunks() -> None:
    data = _pages(8000)
    moved = _pages(3, seed=2) + data  # the same pages, three pages later
    first, second = _hashes(data), _hashes(moved)
    shared = len(first & second)
    assert shared >= len(first) - 2, (shared, len(first))  # only the pieces at the head differ


def _image(tmp_path: Path, name: str, pages: bytes) -> Path:
    image = tmp_path / name
    image.mkdir()
    (image / "checkpoint.img").write_bytes(b"kernel" * 1000)
    (image / "pages.img").write_bytes(pages)
    return image


def test_a_second_image_with_its_pages_moved_uploads_little(tmp_path: Path) -> None:
    store = MemoryStore(LocalObjects(tmp_path / "objects"), max_bytes=1 << 30)
    data = _pages(8000)
    first = store.put(_image(tmp_path, "one", data), META)
    second = store.put(_image(tmp_path, "two", _pages(3, seed=3) + data), META)
    assert second.new_bytes < first.stored_bytes / 3, (second.new_bytes, first.stored_bytes)
    out = tmp_path / "out"
    out.mkdir()
    store.fetch(META, second.sha256, out)
    assert (out / "pages.img").read_bytes() == _pages(3, seed=3) + data
