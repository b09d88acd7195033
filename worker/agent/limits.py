"""Roots, caps and the sandbox's fixed names: defined here once, for both ends.

The worker imports this module (``worker.agent.limits``) for the snapshot
roots; the agent reads ``limits.ROOTS`` at call time (not a copy bound at
import), so a test can point the roots at a temporary tree.
"""

from __future__ import annotations

from typing import Any

from .errors import AgentError

__all__ = [
    "BASE_ENV",
    "CLEANUP_WAIT_S",
    "ENOSPC_TEXT",
    "EXIT_GRACE_S",
    "GID",
    "HOME",
    "KILL_BUDGET_S",
    "MAX_LIST_ENTRIES",
    "MAX_RAW_PAYLOAD",
    "MAX_SCAN_INLINE",
    "MEMORY_LIMIT_FILE",
    "MEMORY_USAGE_FILE",
    "OOM_FILES",
    "PIDS_CURRENT_FILE",
    "PIDS_MAX_FILE",
    "PIPE_SIZE",
    "READ_CHUNK",
    "ROOTS",
    "UID",
    "VERSION",
    "WORKSPACE",
    "check_roots",
    "check_size",
    "inside",
]

VERSION = 1
WORKSPACE = "/workspace"
HOME = "/home/sandbox"
ROOTS = (WORKSPACE, HOME)
"""What a snapshot holds: the only trees ``scan``, ``pack`` and ``unpack`` touch."""
UID = GID = 1000
MAX_RAW_PAYLOAD = 46 << 20  # raw bytes that still fit a frame once base64-encoded
MAX_LIST_ENTRIES = 100_000
MAX_SCAN_INLINE = 1 << 20  # bytes of changed small files a scan may carry (its ``inline``)
KILL_BUDGET_S = 0.8  # the reply must come within timeout + 1 s
CLEANUP_WAIT_S = 5.0
EXIT_GRACE_S = 0.1  # read on after the command exits, while descendants hold its pipes
READ_CHUNK = 1 << 20
PIPE_SIZE = 1 << 20
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": HOME,
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
}
PIDS_MAX_FILE = "/sys/fs/cgroup/pids/pids.max"
PIDS_CURRENT_FILE = "/sys/fs/cgroup/pids/pids.current"
MEMORY_LIMIT_FILE = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
MEMORY_USAGE_FILE = "/sys/fs/cgroup/memory/memory.usage_in_bytes"
OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
ENOSPC_TEXT = b"No space left on device"


def inside(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or below one (no prefix tricks)."""
    return any(path == r or path.startswith(r + "/") for r in roots)


def check_roots(roots: Any) -> tuple[str, ...]:
    """Snapshot roots of a request: a non-empty list, each one of ``ROOTS``."""
    allowed = ROOTS
    if not isinstance(roots, list) or not roots or not all(r in allowed for r in roots):
        raise AgentError(
            "invalid_input", f"roots must be a non-empty subset of {list(allowed)}", field="roots"
        )
    return tuple(roots)


def check_size(size: int, what: str) -> None:
    """Refuse raw bytes that would not fit a reply frame once base64-encoded."""
    if size > MAX_RAW_PAYLOAD:
        raise AgentError(
            "payload_too_large",
            f"{what} is over {size} bytes; the cap is {MAX_RAW_PAYLOAD}",
            size=size,
            limit=MAX_RAW_PAYLOAD,
        )
