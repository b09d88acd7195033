"""Calls the runtime contract suites make on a sandbox: one exec, a tar built in memory.

Shared by ``tests/integration/test_backend_contract.py``, ``test_files_contract.py``
and ``test_isolation_contract.py``.
"""

from __future__ import annotations

import base64
import io
import tarfile
from typing import Any

from sandgrid.models import ExecRequest
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager

__all__ = ["run", "tar_b64", "tar_of"]


def run(backend: SandboxManager, sbx: Sandbox, **kw: Any) -> Any:
    return exec_command(backend, sbx, ExecRequest(**kw))


def tar_of(members: dict[str, bytes | str]) -> bytes:
    """A tar: bytes values are files, ``"->target"`` strings are symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value.removeprefix("->")
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    return buf.getvalue()


def tar_b64(members: dict[str, bytes | str]) -> str:
    """``tar_of`` as a tar upload carries it: base64."""
    return base64.b64encode(tar_of(members)).decode()
