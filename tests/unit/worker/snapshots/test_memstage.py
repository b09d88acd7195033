"""Images staged ahead for a resume on this node (24.1): keyed, taken once, bounded."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.snapshots.memory import MemoryMeta, MemoryRefused
from worker.snapshots.memstage import StagedImages

SHA = "c" * 64
META = MemoryMeta("acme", "s-1", "snap-1", "python-gvisor", "runsc")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _stage(tmp_path: Path, max_bytes: int = 1 << 20, clock: _Clock | None = None) -> StagedImages:
    return StagedImages(tmp_path / "stage", max_bytes, 60.0, clock or _Clock())


def _fill(size: int, meta: MemoryMeta = META) -> Callable[[Path], MemoryMeta]:
    def fill(dest: Path) -> MemoryMeta:
        (dest / "pages.img").write_bytes(b"p" * size)
        (dest / "checkpoint.img").write_bytes(b"k")
        return meta

    return fill


def _dest(tmp_path: Path, name: str = "restore") -> Path:
    out = tmp_path / name
    out.mkdir()
    return out


def test_a_staged_image_is_moved_into_the_restore_once(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    assert stage.stage(META, SHA, _fill(100))
    assert stage.has("acme", "s-1", SHA) and stage.size() == 101
    dest = _dest(tmp_path)
    assert stage.take(META, SHA, dest) == META
    assert (dest / "pages.img").read_bytes() == b"p" * 100
    assert (dest / "checkpoint.img").read_bytes() == b"k"
    assert stage.take(META, SHA, _dest(tmp_path, "again")) is None  # taken once
    assert stage.size() == 0 and list((tmp_path / "stage").iterdir()) == []


def test_another_session_tenant_or_image_takes_nothing(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    stage.stage(META, SHA, _fill(10))
    other_session = MemoryMeta("acme", "s-2", "snap-1", "python-gvisor", "runsc")
    other_tenant = MemoryMeta("globex", "s-1", "snap-1", "python-gvisor", "runsc")
    dest = _dest(tmp_path)
    assert stage.take(other_session, SHA, dest) is None
    assert stage.take(other_tenant, SHA, dest) is None
    assert stage.take(META, "d" * 64, dest) is None
    assert list(dest.iterdir()) == [] and stage.has("acme", "s-1", SHA)


def test_a_record_that_moved_on_is_refused_and_dropped(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    stage.stage(META, SHA, _fill(10))
    later = MemoryMeta("acme", "s-1", "snap-2", "python-gvisor", "runsc")  # the workspace moved
    with pytest.raises(MemoryRefused, match="another snapshot"):
        stage.take(later, SHA, _dest(tmp_path))
    assert not stage.has("acme", "s-1", SHA) and stage.size() == 0


def test_a_fill_for_another_owner_or_that_fails_keeps_nothing(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    theirs = MemoryMeta("globex", "s-1", "snap-1", "python-gvisor", "runsc")
    with pytest.raises(MemoryRefused):
        stage.stage(META, SHA, _fill(10, theirs))

    def broken(dest: Path) -> MemoryMeta:
        (dest / "pages.img").write_bytes(b"half")
        raise OSError("the store went away")

    with pytest.raises(OSError):
        stage.stage(META, SHA, broken)
    assert stage.size() == 0 and list((tmp_path / "stage").iterdir()) == []


def test_the_oldest_is_dropped_past_the_size_and_a_larger_image_is_not_kept(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    stage = _stage(tmp_path, max_bytes=250, clock=clock)
    metas = [MemoryMeta("acme", f"s-{i}", "snap-1", "python-gvisor", "runsc") for i in range(3)]
    for meta in metas:
        assert stage.stage(meta, SHA, _fill(99, meta))
        clock.now += 1
    assert not stage.has("acme", "s-0", SHA)  # 3 x 100 > 250: the oldest went
    assert stage.has("acme", "s-1", SHA) and stage.has("acme", "s-2", SHA)
    assert stage.size() <= 250
    big = MemoryMeta("acme", "s-big", "snap-1", "python-gvisor", "runsc")
    assert not stage.stage(big, SHA, _fill(300, big))
    assert not stage.has("acme", "s-big", SHA) and stage.has("acme", "s-2", SHA)


def test_an_image_past_its_age_is_dropped_not_taken(tmp_path: Path) -> None:
    clock = _Clock()
    stage = _stage(tmp_path, clock=clock)
    stage.stage(META, SHA, _fill(10))
    clock.now += 61
    assert stage.take(META, SHA, _dest(tmp_path)) is None
    assert stage.size() == 0 and list((tmp_path / "stage").iterdir()) == []


def test_one_image_stages_at_a_time_and_another_request_is_dropped(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    started, go = threading.Event(), threading.Event()

    def slow(dest: Path) -> MemoryMeta:
        started.set()
        go.wait(10)
        return _fill(10)(dest)

    worker = threading.Thread(target=stage.stage, args=(META, SHA, slow))
    worker.start()
    assert started.wait(10) and stage.busy
    other = MemoryMeta("acme", "s-2", "snap-1", "python-gvisor", "runsc")
    assert not stage.stage(other, SHA, _fill(10, other))
    go.set()
    worker.join(10)
    assert not stage.busy and stage.has("acme", "s-1", SHA) and not stage.has("acme", "s-2", SHA)


def test_a_new_stage_starts_empty(tmp_path: Path) -> None:
    (tmp_path / "stage" / "s-left").mkdir(parents=True)
    (tmp_path / "stage" / "s-left" / "pages.img").write_bytes(b"x")
    assert list(_stage(tmp_path).root.iterdir()) == []
