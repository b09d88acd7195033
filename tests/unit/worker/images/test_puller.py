"""ImagePuller: present costs nothing, absent is pulled once per node, timed (25.3)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import REGISTRY

from sandgrid.errors import CapacityError
from tests.unit.worker.images.fakes import FakeEngine
from worker.images.puller import IMAGE_UNAVAILABLE, ImagePuller

REG = "127.0.0.1:5000"
D = "sha256:" + "ab" * 32
REMOTE = f"{REG}/sandgrid/sandbox-python@{D}"


def pulls(repository: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "sandgrid_worker_image_pull_seconds_count",
        {"repository": repository, "outcome": outcome},
    )
    return value or 0.0


def test_an_image_present_is_used_as_it_is() -> None:
    engine = FakeEngine(present={"sandgrid/sandbox-python:latest"})
    puller = ImagePuller(engine, REG, node="n1")
    assert puller.ensure("sandgrid/sandbox-python:latest") == "sandgrid/sandbox-python:latest"
    assert engine.pulls == []


def test_an_absent_image_is_pulled_by_digest_and_timed(caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine(registry={REMOTE})
    before = pulls("sandgrid/sandbox-python", "ok")
    with caplog.at_level("INFO", logger="worker.images.puller"):
        got = ImagePuller(engine, REG, node="n1").ensure("sandgrid/sandbox-python:latest", D)
    assert got == REMOTE and engine.pulls == [REMOTE]
    assert pulls("sandgrid/sandbox-python", "ok") == before + 1
    line = caplog.records[-1].getMessage()
    assert f"reference={REMOTE}" in line and "outcome=ok" in line and "seconds=" in line


def test_a_digest_is_not_satisfied_by_the_tag() -> None:
    engine = FakeEngine(present={"sandgrid/sandbox-python:latest"}, registry={REMOTE})
    assert ImagePuller(engine, REG, node="n1").ensure("sandgrid/sandbox-python:latest", D) == REMOTE
    assert engine.pulls == [REMOTE]


def test_callers_at_once_share_one_pull() -> None:
    engine = FakeEngine(registry={REMOTE}, pull_s=0.3)
    puller = ImagePuller(engine, REG, node="n1")
    got: list[str] = []
    threads = [
        threading.Thread(target=lambda: got.append(puller.ensure("sandgrid/sandbox-python", D)))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got == [REMOTE] * 6
    assert engine.pulls == [REMOTE]


def test_a_registry_without_the_image_is_a_clear_error_shared_by_waiters() -> None:
    engine = FakeEngine(pull_s=0.2)
    puller = ImagePuller(engine, REG, node="n1")
    errors: list[CapacityError] = []

    def ask() -> None:
        try:
            puller.ensure("sandgrid/nope:latest")
        except CapacityError as exc:
            errors.append(exc)

    before = pulls("sandgrid/nope", "missing")
    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(errors) == 3 and len(engine.pulls) == 1
    err = errors[0]
    assert err.context["reason"] == IMAGE_UNAVAILABLE and err.http_status == 503
    assert "sandgrid/nope:latest" in err.message and f"registry {REG} has no" in err.message
    assert pulls("sandgrid/nope", "missing") == before + 1
    with pytest.raises(CapacityError):  # the next ask tries again: no failure is kept
        puller.ensure("sandgrid/nope:latest")
    assert len(engine.pulls) == 2


def test_a_registry_out_of_reach_says_so() -> None:
    engine = FakeEngine(down=True)
    with pytest.raises(CapacityError, match="could not serve") as err:
        ImagePuller(engine, REG, node="n1").ensure("sandgrid/x:latest")
    assert "connection refused" in err.value.message
