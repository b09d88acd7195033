"""Image files shared by a node's restores: a fork's copies are linked, not written (24.4)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from sandgrid.wire.objects import LocalObjects
from tests.support.memory_images import memory_image
from worker.snapshots.memchunks import Chunk
from worker.snapshots.memory import MemoryMeta, MemoryStore
from worker.snapshots.memshare import SharedFiles

CHUNKS = [Chunk("a" * 64, 10, 100), Chunk("b" * 64, 10, 50)]


def _forks(tmp_path: Path, n: int) -> tuple[MemoryStore, list[MemoryMeta], list[str]]:
    objects = LocalObjects(tmp_path / "objects")
    metas = [MemoryMeta("acme", f"f-{i}", None, "python-gvisor", "runsc") for i in range(n)]
    stored = MemoryStore(objects, max_bytes=1 << 30).put_many(memory_image(tmp_path), metas)
    store = MemoryStore(objects, max_bytes=1 << 30, share=SharedFiles())
    return store, metas, [s.sha256 for s in stored]


def _out(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    out.mkdir()
    return out


def test_a_second_restore_of_a_forks_file_links_the_first_ones_copy(tmp_path: Path) -> None:
    store, metas, shas = _forks(tmp_path, 2)
    first, second = _out(tmp_path, "r0"), _out(tmp_path, "r1")
    store.fetch(metas[0], shas[0], first)
    assert store.fetch_counted(metas[1], shas[1], second)[1] == 0  # nothing fetched
    for name in ("pages.img", "checkpoint.img"):
        assert (second / name).stat().st_ino == (first / name).stat().st_ino
        assert (second / name).read_bytes() == (tmp_path / "image" / name).read_bytes()


def test_a_copy_that_is_gone_is_assembled_again(tmp_path: Path) -> None:
    store, metas, shas = _forks(tmp_path, 2)
    first = _out(tmp_path, "r0")
    store.fetch(metas[0], shas[0], first)
    shutil.rmtree(first)  # that restore ended: its scratch directory is removed
    second = _out(tmp_path, "r1")
    assert store.fetch_counted(metas[1], shas[1], second)[1] == 3  # fetched itself
    assert (second / "pages.img").read_bytes() == (tmp_path / "image" / "pages.img").read_bytes()


def test_another_tenant_or_other_chunks_are_never_linked(tmp_path: Path) -> None:
    share = SharedFiles()
    mine, ticket = share.claim("acme", "pages.img", CHUNKS)
    assert mine
    assert share.claim("globex", "pages.img", CHUNKS)[0]  # another tenant: its own
    assert share.claim("acme", "pages.img", CHUNKS[:1])[0]  # other contents
    assert share.claim("acme", "other.img", CHUNKS)[0]  # another file
    assert not share.claim("acme", "pages.img", CHUNKS)[0]  # the same: wait and link
    ticket.finish(None)


def test_a_failed_copy_is_not_linked_and_the_waiter_assembles_its_own(tmp_path: Path) -> None:
    share = SharedFiles()
    _, ticket = share.claim("acme", "pages.img", CHUNKS)
    owned, held = share.claim("acme", "pages.img", CHUNKS)
    assert not owned
    linked: list[bool] = []
    waiter = threading.Thread(target=lambda: linked.append(held.link(tmp_path / "dest")))
    waiter.start()
    ticket.finish(None)  # the owner failed
    waiter.join(5)
    assert linked == [False] and not (tmp_path / "dest").exists()
    assert share.claim("acme", "pages.img", CHUNKS)[0]  # the next restore makes it
