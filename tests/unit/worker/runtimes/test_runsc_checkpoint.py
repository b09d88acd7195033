"""gVisor's checkpoint and restore as ``DockerRunsc`` asks for them (issue 24.1; no engine)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import SandboxError
from sandgrid.models import Quotas
from sandgrid.wire.settings import get_settings
from worker.quotas import sandbox_labels, sandbox_spec
from worker.runtimes.docker_runc import DockerRunc
from worker.runtimes.docker_runsc import RESTORE_BACKGROUND_ENV, RESTORE_ENV, DockerRunsc
from worker.runtimes.spec import SandboxSpec


class _Api:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        return kw

    def create_container(self, **kw: Any) -> dict[str, str]:
        self.created.append(kw)
        return {"Id": "c" * 64}

    def inspect_container(self, cid: str) -> dict[str, Any]:
        return {"Id": "f" * 64}


class _Client:
    def __init__(self) -> None:
        self.api = _Api()


def _spec(restore: Path | None = None) -> SandboxSpec:
    labels = sandbox_labels(node="n1", sandbox_type="python-gvisor", incarnation="inc")
    spec = sandbox_spec(
        Quotas.model_validate({}), image="img", name="c", labels=labels, runtime="runsc"
    )
    return SandboxSpec(**{**spec.__dict__, "restore_image": restore})


def test_a_restore_is_created_under_the_restore_runtime_with_its_image() -> None:
    client = _Client()
    DockerRunsc(client=client).create(_spec(Path("/var/lib/sandgrid/memory/x")))  # type: ignore[arg-type]
    made = client.api.created[0]
    assert made["host_config"]["runtime"] == get_settings().worker.memory.restore_runtime
    assert made["environment"][RESTORE_ENV] == "/var/lib/sandgrid/memory/x"


def test_a_plain_create_names_no_image() -> None:
    client = _Client()
    DockerRunsc(client=client).create(_spec())  # type: ignore[arg-type]
    made = client.api.created[0]
    assert made["host_config"]["runtime"] == "runsc" and RESTORE_ENV not in made["environment"]


def test_checkpoint_runs_runsc_against_dockers_root(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", run)
    DockerRunsc(client=_Client()).checkpoint("abc", Path("/img"))  # type: ignore[arg-type]
    DockerRunsc(client=_Client()).checkpoint("abc", Path("/img"), leave_running=True)  # type: ignore[arg-type]
    memory = get_settings().worker.memory
    head = [str(memory.runsc_path), "--root", str(memory.runsc_root), "checkpoint"]
    zero = ["--exclude-committed-zero-pages"]
    assert seen == [
        [*head, *zero, "--image-path", "/img", "f" * 64],
        [*head, "--leave-running", *zero, "--image-path", "/img", "f" * 64],
    ]


def test_a_restore_asks_the_wrapper_for_background_loading() -> None:
    client = _Client()
    DockerRunsc(client=client).create(_spec(Path("/img")))  # type: ignore[arg-type]
    made = client.api.created[0]
    assert made["environment"][RESTORE_ENV] == "/img"
    assert made["environment"][RESTORE_BACKGROUND_ENV] == "1"


def test_a_failed_checkpoint_says_runscs_last_words(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(cmd, 128, b"", b"x\ncannot save a host socket\n")

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(SandboxError, match="cannot save a host socket"):
        DockerRunsc(client=_Client()).checkpoint("abc", Path("/img"))  # type: ignore[arg-type]


def test_runc_cannot_checkpoint() -> None:
    runc = DockerRunc(client=_Client())  # type: ignore[arg-type]
    assert runc.can_checkpoint is False and DockerRunsc.can_checkpoint is True
    with pytest.raises(SandboxError, match="runc runtime cannot checkpoint"):
        runc.checkpoint("abc", Path("/img"))
