"""A file too large for one frame, snapshotted and restored through real sandboxes.

Run against each real runtime (runc, runsc) with the fixtures of ``conftest``,
and a local store: 60 MB of random bytes, in a read-only directory, travel in
chunks (``read_range``, ``write_range``) into a new sandbox byte for byte; a
workspace too small for them fails the restore with the error ``unpack`` gives.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, SnapshotError
from sandgrid.models import ExecRequest, Quotas
from tests.support.snapshot_stores import local_store
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager
from worker.snapshots import restore_sandbox, snapshot_sandbox
from worker.snapshots import sync as sync_mod
from worker.snapshots.sync import CHUNK_BYTES, LARGE_FILE_BYTES

pytestmark = pytest.mark.integration

SIZE = 60_000_000
TENANT = "acme"


def run(backend: SandboxManager, sbx: Sandbox, shell: str) -> str:
    result = exec_command(backend, sbx, ExecRequest(shell=shell, timeout_s=60))
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_a_60_mb_file_is_snapshotted_and_restored_in_chunks(
    backend: SandboxManager,
    sandbox_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert SIZE > LARGE_FILE_BYTES
    src = sandbox_factory()
    sha = run(backend, src, f"mkdir data && head -c {SIZE} /dev/urandom > data/big.bin "
              "&& chmod 640 data/big.bin && echo small > data/small && chmod 555 data "
              "&& sha256sum data/big.bin").split()[0]  # fmt: skip
    ops: Counter[str] = Counter()
    call = backend.call

    def spy(sbx: Sandbox, op: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
        ops[op] += 1
        return call(sbx, op, fields, **kw)

    monkeypatch.setattr(backend, "call", spy)
    with local_store(tmp_path / "store") as store:
        ref = snapshot_sandbox(backend.files, src, store, TENANT, "s1", None)
        assert ref is not None and ref.stats["bytes"] == SIZE + len("small\n")
        chunks = -(-SIZE // CHUNK_BYTES)
        # the small file came with the scan (its ``inline``): no pack of its own (22.2);
        # under runc the host read the large one too (``hostfiles``), not the agent
        expected = (0, 0) if backend.runtime == "runc" else (chunks, 0)
        assert (ops["read_range"], ops["pack"]) == expected

        dst = sandbox_factory()
        run(backend, dst, "echo stale > stale")
        restore_sandbox(backend.files, dst, store, TENANT, "s1", ref)
        assert (ops["write_range"], ops["unpack"]) == (chunks, 2)  # the last sets dir modes
        listing = run(backend, dst, "sha256sum data/big.bin; stat -c %a data/big.bin data; "
                      "cat data/small; ls")  # fmt: skip
        assert listing == f"{sha}  data/big.bin\n640\n555\nsmall\ndata\n"

        full = sandbox_factory(quotas=Quotas(workspace_mb=32))
        with pytest.raises(SnapshotError) as err:
            restore_sandbox(backend.files, full, store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_FAILED
    assert err.value.context["sandbox_dirty"] is True
    assert "/workspace/data/big.bin: No space left on device" in err.value.message


def test_directory_modes_in_several_tars_reach_every_directory(
    backend: SandboxManager,
    sandbox_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Directories the user closed to themselves (0100: not listable) are still
    snapshotted (the agent opens them for the walk and closes them again), and
    when there are too many directories for one modes tar, the tars go deepest
    first, so none is closed before everything below it has its mode."""
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", 8 << 10)  # ~14 headers a tar
    src = sandbox_factory()
    closed = "$([ $((i % 2)) = 1 ] && echo 100 || echo 555)"  # 100: x only, not listable
    run(backend, src, "for i in $(seq 0 11); do mkdir -p d$i/inner/leaf; "
        "echo $i > d$i/inner/leaf/f; chmod 500 d$i/inner/leaf; "
        f"chmod {closed} d$i/inner; chmod 500 d$i; done")  # fmt: skip
    unpacks: list[int] = []
    unpack = backend.files.unpack

    def spy(sbx: Sandbox, data: bytes, roots: list[str], clear: bool) -> int:
        unpacks.append(len(data))
        return unpack(sbx, data, roots, clear)

    monkeypatch.setattr(backend.files, "unpack", spy)
    with local_store(tmp_path / "store") as store:
        ref = snapshot_sandbox(backend.files, src, store, TENANT, "s1", None)
        assert ref is not None
        dst = sandbox_factory()
        restore_sandbox(backend.files, dst, store, TENANT, "s1", ref)
    assert len(unpacks) > 4 and max(unpacks) <= 8 << 10
    show = "stat -c '%a %n' $(find . -mindepth 1 | sort) 2>&1"
    assert run(backend, dst, show) == run(backend, src, show)
