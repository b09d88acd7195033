"""Staging a paused session's image ahead on a peer (24.1), around fakes: which peer,
the request sent, and a resume that takes the staged files instead of fetching."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sandgrid.wire import names
from sandgrid.wire.ledger import NodeRecord
from sandgrid.wire.objects import keys
from sandgrid.wire.settings import get_settings
from tests.support.snapshot_stores import local_store
from tests.unit.worker.turns.test_memory_turns import (
    _Backend,
    _Engine,
    _info,
    _Ledger,
    _local,
    _scratch,  # noqa: F401  (the same autouse fixture: images under tmp_path)
)
from worker import metrics
from worker.snapshots.memory import MemoryMeta
from worker.turns import memory, memory_stage


def _records(**types: tuple[str, ...] | None) -> dict[str, NodeRecord]:
    return {name: NodeRecord(ts=1.0, types=t) for name, t in types.items()}


def test_the_peer_is_another_live_node_serving_the_type() -> None:
    records = _records(w1=("python-gvisor",), w2=("python",), w3=("python-gvisor",), w4=None)
    picked = {memory_stage.pick_peer(records, "w1", "python-gvisor", f"s-{i}") for i in range(40)}
    assert picked == {"w3", "w4"}  # never the pausing node, never one without the type
    assert memory_stage.pick_peer(records, "w1", "python-gvisor", "s-7") == (
        memory_stage.pick_peer(records, "w1", "python-gvisor", "s-7")
    )
    assert memory_stage.pick_peer(_records(w1=None), "w1", "python-gvisor", "s-1") is None


class _Nodes:
    def __init__(self, records: dict[str, NodeRecord]) -> None:
        self.records = records

    def node_records(self) -> dict[str, NodeRecord]:
        return self.records


def test_offer_sends_the_stage_to_the_peers_direct_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(
        memory_stage.app, "send_task", lambda name, **kw: sent.append(kw | {"name": name})
    )
    nodes = _Nodes(_records(w1=None, w2=("python-gvisor",)))
    memory_stage.offer(nodes, "w1", "python-gvisor", "s-1", "f" * 64)  # type: ignore[arg-type]
    assert sent == [
        {
            "name": names.TASK_STAGE,
            "args": ["s-1", "f" * 64],
            "queue": "node.w2",
            "expires": memory_stage.STAGE_EXPIRES_S,
        }
    ]
    memory_stage.offer(_Nodes(_records(w1=None)), "w1", "python-gvisor", "s-1", "f" * 64)  # type: ignore[arg-type]
    assert len(sent) == 1  # no peer: nothing sent


def test_a_failing_offer_never_fails_the_pause(tmp_path: Path) -> None:
    class Broken:
        def node_records(self) -> dict[str, NodeRecord]:
            raise ConnectionError("redis went away")

    store, ledger, backend = local_store(tmp_path / "objects"), _Ledger(), _Backend(_Engine())
    offered: list[str] = []

    def stored_as(sha: str) -> None:
        offered.append(sha)
        memory_stage.offer(Broken(), "w1", "python-gvisor", "s-1", sha)  # type: ignore[arg-type]

    done = memory.pause(ledger, store, backend, _local(), stored_as=stored_as)  # type: ignore[arg-type]
    assert done.memory and offered == [ledger.updates[-1]["memory_image"]]
    assert ledger.updates[-1]["memory_staged_on"] is None  # a new image: no stage yet


def test_a_resume_takes_the_staged_image_without_fetching_it(tmp_path: Path) -> None:
    store, ledger, backend = local_store(tmp_path / "objects"), _Ledger(), _Backend(_Engine())
    memory.pause(ledger, store, backend, _local())  # type: ignore[arg-type]
    sha = ledger.updates[-1]["memory_image"]
    want = MemoryMeta("acme", "s-1", None, "python-gvisor", "runsc")
    images, staged = memory.memory_store(store), memory.staged_images()
    assert staged is not None
    assert staged.stage(want, sha, lambda dest: images.fetch(want, sha, dest))
    store.objects.delete(keys.memory_image_key("acme", "s-1", sha))  # a fetch would fail now
    taken = metrics.MEMORY_RESUMES.labels(source="staged")._value.get()

    local = memory.arrive(ledger, store, backend, _info(sha))  # type: ignore[arg-type]
    assert local is not None and local.sandbox.lineage == ("old",)
    assert ledger.updates[-1] == {"memory_restored": True, "memory_reason": None}
    assert not staged.has("acme", "s-1", sha)  # taken once
    assert metrics.MEMORY_RESUMES.labels(source="staged")._value.get() == taken + 1


def test_staging_off_stages_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGRID_WORKER__MEMORY__STAGE_MB", "0")
    get_settings.cache_clear()
    assert memory.staged_images() is None
    off = metrics.MEMORY_STAGES.labels(result="off")._value.get()
    assert memory_stage.stage("w2", object(), "s-1", "f" * 64) == "off"  # type: ignore[arg-type]
    assert metrics.MEMORY_STAGES.labels(result="off")._value.get() == off + 1


class _Records:
    def __init__(self, *infos: Any) -> None:
        self.infos = {i.id: i for i in infos}

    def get_any(self, session_id: str) -> Any:
        return self.infos.get(session_id)


def _filled(want: MemoryMeta) -> Callable[[Path], MemoryMeta]:
    def fill(dest: Path) -> MemoryMeta:
        (dest / "pages.img").write_bytes(b"p")
        return want

    return fill


def test_restores_starting_together_share_one_stage_and_one_cache() -> None:
    """Four threads asking at once for the process's stage and cache each get the
    same one, made once (two stages made at once: ``mkdir`` failed with EEXIST)."""
    memory._stage_at.cache_clear()
    memory._cache_at.cache_clear()
    start = threading.Barrier(4)

    def ask() -> tuple[object, object]:
        start.wait()
        return memory.staged_images(), memory.chunk_cache()

    with ThreadPoolExecutor(4) as pool:
        asked = [pool.submit(ask) for _ in range(4)]
    got = [f.result() for f in asked]  # an error made in any thread is raised here
    assert len({id(stage) for stage, _ in got}) == 1 and len({id(cache) for _, cache in got}) == 1


def test_staged_images_no_record_names_are_dropped_before_the_next_stage() -> None:
    staged = memory.staged_images()
    assert staged is not None
    for sid in ("s-1", "s-2", "s-3"):
        want = MemoryMeta("acme", sid, None, "python-gvisor", "runsc")
        assert staged.stage(want, "a" * 64, _filled(want))
    kept = _info("a" * 64)  # s-1 still paused with that image
    moved = _info(None).model_copy(update={"id": "s-2"})  # s-2 resumed elsewhere; s-3 closed
    memory_stage._prune(staged, _Records(kept, moved))  # type: ignore[arg-type]
    assert staged.staged() == [("acme", "s-1", "a" * 64)]


def test_a_stage_whose_registry_fails_says_failed() -> None:
    class Down:
        def get_any(self, session_id: str) -> Any:
            raise ConnectionError("redis went away")

    class Parts:
        ledger = Down()

    failed = metrics.MEMORY_STAGES.labels(result="failed")._value.get()
    assert memory_stage.stage("w2", Parts(), "s-1", "f" * 64) == "failed"  # type: ignore[arg-type]
    assert metrics.MEMORY_STAGES.labels(result="failed")._value.get() == failed + 1
