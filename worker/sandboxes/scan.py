"""The worker's half of the incremental scan: how a reply updates the rows it keeps.

The agent answers a ``scan`` with every row, or, when asked ``since`` the token
of its last reply, with only the rows changed and the paths removed since
(docs/agent-protocol.md). ``AgentFiles.scan`` keeps a ``ScanState`` (the
agent's own class, ``worker.agent.scanstate``: one meaning of a delta on both
ends) on the sandbox and ``apply_reply`` checks each reply and turns it into
the next state.
"""

from __future__ import annotations

import binascii
from typing import Any

from sandgrid.errors import SandboxError
from worker.agent.limits import MAX_SCAN_INLINE
from worker.agent.scanstate import ScanRow, ScanState

__all__ = ["apply_reply", "inline_of"]


def apply_reply(
    reply: dict[str, Any], roots: tuple[str, ...], prior: ScanState | None
) -> ScanState:
    """The rows after a scan reply: ``prior``'s with the delta applied when the
    reply answers ``prior.token``, else the reply's full ``entries``.

    Raises:
        SandboxError: the reply is malformed (rows must be 6-element lists
            with a string path; the snapshot store validates the rest).
    """
    token = reply.get("token")
    if not isinstance(token, str):
        raise _bad_scan("token must be a string")
    if prior is None or reply.get("since") != prior.token:
        full = _scan_rows(reply.get("entries"), "entries")
        rows = {r[0]: r for r in full}
        return ScanState(token, roots, rows, sorted(rows.values()))
    changed = _scan_rows(reply.get("changed"), "changed")
    removed = reply.get("removed")
    if not isinstance(removed, list) or not all(type(p) is str for p in removed):
        raise _bad_scan("removed must be a list of paths")
    if not changed and not removed:
        return ScanState(token, roots, prior.rows, prior.ordered)
    prior.apply(changed, removed)
    return ScanState(token, roots, prior.rows, sorted(prior.rows.values()))


def inline_of(reply: dict[str, Any]) -> dict[str, bytes]:
    """The bytes of the small files a scan reply carries (``inline``: path -> base64),
    as the agent read them; none when it carries none. The snapshot uses one only
    once it hashes to its row's sha256 (``worker.snapshots.sync``).

    Raises:
        SandboxError: ``inline`` is malformed or carries more than ``MAX_SCAN_INLINE``.
    """
    value = reply.get("inline")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad_scan("inline must map paths to base64")
    out: dict[str, bytes] = {}
    total = 0
    for path, text in value.items():
        if type(path) is not str or type(text) is not str:
            raise _bad_scan("inline must map paths to base64")
        try:
            out[path] = data = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            raise _bad_scan(f"inline bytes of {path[:200]!r} are not base64") from None
        total += len(data)
        if total > MAX_SCAN_INLINE:
            raise _bad_scan(f"inline carries more than {MAX_SCAN_INLINE} bytes")
    return out


def _scan_rows(value: Any, what: str) -> list[ScanRow]:
    out: list[ScanRow] = []
    if isinstance(value, list):
        for r in value:
            if type(r) is not list or len(r) != 6 or type(r[0]) is not str:
                break
            out.append((r[0], r[1], r[2], r[3], r[4], r[5]))
        else:
            return out
    raise _bad_scan(f"{what} must be a list of [path, type, mode, size, sha256, target] rows")


def _bad_scan(why: str) -> SandboxError:
    return SandboxError(f"malformed scan reply from the agent: {why}", operation="snapshot.scan")
