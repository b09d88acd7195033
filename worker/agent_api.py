"""The agent's snapshot replies, checked on the worker side: roots and read ranges.

What is left of the worker's codec of agent replies once the turn ops' request
fields and reply parsing moved beside their handlers (``worker.ops``): the half
that the snapshot ops of the backend (``worker.backends.snapshot_ops``) and the
snapshot side of a sandbox (``worker.snapshots.sandbox``) use. Pure functions
(no I/O), unit-tested without Docker.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

from sandgrid.errors import InvalidInput, SandboxError
from worker.agent.limits import ROOTS

__all__ = [
    "SNAPSHOT_ROOTS",
    "FileRange",
    "check_roots",
    "file_range",
]

SNAPSHOT_ROOTS = ROOTS
"""What a snapshot holds: the agent's own roots (``worker.agent.limits.ROOTS``)."""


def check_roots(roots: list[str], operation: str) -> list[str]:
    """Snapshot roots must be a non-empty subset of ``SNAPSHOT_ROOTS``."""
    if not roots or any(r not in SNAPSHOT_ROOTS for r in roots):
        raise InvalidInput(
            f"roots must be a non-empty subset of {list(SNAPSHOT_ROOTS)}, got {roots!r}",
            operation=operation,
            context={"field": "roots", "value": list(roots)},
        )
    return list(roots)


class FileRange(NamedTuple):
    """Bytes of a file from some offset (``read_range``), with the file's size and
    mtime as they were after the read: a file that changes between two reads
    shows it there."""

    data: bytes
    size: int
    mtime_ns: int


def file_range(reply: dict[str, Any]) -> FileRange:
    """The ``FileRange`` of a ``read_range`` reply.

    Raises:
        SandboxError: the reply is malformed.
    """
    try:
        size, mtime_ns = reply["size"], reply["mtime_ns"]
        if type(size) is not int or type(mtime_ns) is not int:
            raise TypeError("size and mtime_ns must be integers")
        return FileRange(base64.b64decode(reply["data_b64"], validate=True), size, mtime_ns)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise SandboxError(
            f"malformed read_range reply from the agent: {exc}", operation="snapshot.read"
        ) from None
