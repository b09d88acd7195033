"""Image files shared by a node's restores: a fork's copies are linked, not written (24.4)."""

from __future__ import annotations

import shutil
import threading
import time
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


# ---- the source's own files, offered to its forks on this node --------------------------


def _offering(tmp_path: Path, keep_s: float = 60.0) -> tuple[MemoryStore, SharedFiles]:
    share = SharedFiles(tmp_path / "offered", keep_s=keep_s)
    return MemoryStore(LocalObjects(tmp_path / "objects"), max_bytes=1 << 30, share=share), share


def test_a_forks_restore_on_the_source_node_links_the_checkpoints_own_files(
    tmp_path: Path,
) -> None:
    store, _ = _offering(tmp_path)
    image = memory_image(tmp_path)
    metas = [MemoryMeta("acme", f"f-{i}", None, "python-gvisor", "runsc") for i in range(2)]
    stored = store.put_many(image, metas)
    inodes = {n: (image / n).stat().st_ino for n in ("pages.img", "checkpoint.img")}
    expected = {n: (image / n).read_bytes() for n in inodes}
    shutil.rmtree(image)  # the checkpoint's scratch directory goes after the put
    out = _out(tmp_path, "r0")
    assert store.fetch_counted(metas[0], stored[0].sha256, out)[1] == 0  # nothing fetched
    for name, ino in inodes.items():
        assert (out / name).stat().st_ino == ino and (out / name).read_bytes() == expected[name]


def test_an_offered_copy_is_never_linked_for_another_tenant(tmp_path: Path) -> None:
    _, share = _offering(tmp_path)
    assert share.offer("acme", {"pages.img": CHUNKS}, memory_image(tmp_path))
    assert share.claim("globex", "pages.img", CHUNKS)[0]  # its own
    assert not share.claim("acme", "pages.img", CHUNKS)[0]  # the offered copy


def test_an_offered_copy_goes_after_its_time(tmp_path: Path) -> None:
    _, share = _offering(tmp_path, keep_s=0.05)
    assert share.offer("acme", {"pages.img": CHUNKS}, memory_image(tmp_path))
    deadline = time.monotonic() + 5
    while any((tmp_path / "offered").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any((tmp_path / "offered").iterdir())
    assert share.claim("acme", "pages.img", CHUNKS)[0]  # gone: the next restore makes it


def test_a_single_pause_offers_nothing(tmp_path: Path) -> None:
    store, _ = _offering(tmp_path)
    store.put(memory_image(tmp_path), MemoryMeta("acme", "s", None, "python-gvisor", "runsc"))
    assert not any((tmp_path / "offered").iterdir())
