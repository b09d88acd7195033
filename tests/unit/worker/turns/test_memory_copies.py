"""Fork and checkpoints with memory around fakes (issue 24.2, 24.3).

One checkpoint of the running source, left running; one manifest per fork over
the same chunks, each naming its own session and workspace copy; a source paused
with memory forked from its image; a checkpoint's image restored more than once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandgrid.wire.objects import keys
from tests.support.snapshot_stores import local_store
from tests.unit.worker.turns.test_memory_turns import (  # the fakes of the pause's tests
    _Backend,
    _Engine,
    _info,
    _Ledger,
    _local,
    _scratch,  # noqa: F401 (autouse: the images' scratch)
)
from worker.snapshots.memory import MemoryMeta
from worker.turns import memory, memory_copies


class _ForkLedger(_Ledger):
    def __init__(self, info: Any = None) -> None:
        super().__init__()
        self.info = info
        self.by_session: dict[str, dict[str, Any]] = {}

    def update(self, session_id: str, **fields: Any) -> None:
        super().update(session_id, **fields)
        self.by_session.setdefault(session_id, {}).update(fields)

    def get_any(self, session_id: str) -> Any:
        return self.info


def test_a_fork_checkpoints_once_leaving_it_running_and_names_each_fork(tmp_path: Path) -> None:
    store, ledger = local_store(tmp_path / "objects"), _ForkLedger()
    engine = _Engine()
    backend = _Backend(engine)
    snaps: dict[str, str | None] = {"f-1": None, "f-2": None}
    saved = memory_copies.fork_memory(ledger, store, backend, _info(None), _local(), snaps)  # type: ignore[arg-type]
    assert engine.left_running is True and set(saved.images) == {"f-1", "f-2"}
    assert saved.images["f-1"].sha256 != saved.images["f-2"].sha256
    assert saved.images["f-2"].new_bytes < saved.images["f-1"].new_bytes  # pages stored once
    for sid in snaps:
        assert ledger.by_session[sid]["memory_image"] == saved.images[sid].sha256
    want = MemoryMeta("acme", "f-2", None, "python-gvisor", "runsc")
    images = memory.memory_store(store)
    assert images.fetch(want, saved.images["f-2"].sha256, tmp_path).session == "f-2"


def test_a_paused_source_is_forked_from_its_image_without_a_checkpoint(tmp_path: Path) -> None:
    store, engine = local_store(tmp_path / "objects"), _Engine()
    backend = _Backend(engine)
    first = _Ledger()
    image = memory.pause(first, store, backend, _local()).memory_bytes and first.updates[-1]  # type: ignore[arg-type]
    info = _info(image["memory_image"])
    ledger = _ForkLedger(info)
    engine.left_running = None
    saved = memory_copies.fork_memory(ledger, store, backend, info, None, {"f-1": None})  # type: ignore[arg-type]
    assert engine.left_running is None and list(saved.images) == ["f-1"]
    assert store.objects.exists(keys.memory_image_key("acme", "s-1", info.memory_image or ""))


def test_a_fork_of_a_source_with_no_sandbox_and_no_image_says_why(tmp_path: Path) -> None:
    store, backend = local_store(tmp_path / "objects"), _Backend(_Engine())
    ledger = _ForkLedger(_info(None))
    saved = memory_copies.fork_memory(ledger, store, backend, _info(None), None, {"f-1": None})  # type: ignore[arg-type]
    assert saved.images == {} and "nothing runs" in (saved.reason or "")
    assert ledger.updates == []


def test_a_checkpoints_image_restores_twice(tmp_path: Path) -> None:
    store, ledger, backend = local_store(tmp_path / "objects"), _Ledger(), _Backend(_Engine())
    kept = memory_copies.checkpoint_memory(store, backend, _local(), "warm", "snap-a")  # type: ignore[arg-type]
    assert kept.images
    shas = []
    for restored in ("snap-b", "snap-c"):
        why = memory_copies.restore_memory(ledger, store, backend, _info(None), "warm", restored)  # type: ignore[arg-type]
        assert why is None
        shas.append(ledger.updates[-1]["memory_image"])
    assert len(set(shas)) == 2
    memory_copies.drop_checkpoint_memory(store, "acme", "s-1", "warm")
    assert not store.objects.exists(keys.memory_checkpoint_key("acme", "s-1", "warm"))
