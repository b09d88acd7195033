"""``scan``: walk the roots as the user and answer every row, or the delta since a token.

PID 1 keeps its last reply (``SCANNED``, a ``scanstate.ScanState``) and a hash
cache (``HASHES``); both change only once a scan has succeeded. The walk runs
on PID 1's own thread acting as the user (``processes.as_user_here``: effective
ids of the user, real and saved ids root, so the user can neither signal nor
trace it), with no fork: a fork of the agent cost ~2.5 ms under runc and ~20 ms
under gVisor, more than the exec of ``true`` before it. Where per-thread ids
are not available (not root: unit tests; an unknown machine) it forks as
``as_user`` does. A delta is answered only to the holder of the token for
the same roots, so a worker that missed a reply (or another worker) gets every
row instead of a diff it cannot apply. Every other scan walks from nothing
(only the hash cache is kept), so a full reply never depends on the rows
remembered.
"""

from __future__ import annotations

import binascii
import os
import stat
import threading
from typing import cast

from .access import lending, listing, settled_ctime, sha256_of, small_file
from .errors import AgentError, Json
from .limits import MAX_SCAN_INLINE, check_roots
from .processes import as_user_files
from .scanstate import ScanRow, ScanState

__all__ = ["HASHES", "SCANNED", "Hashes", "op_scan", "scan_diff", "update"]

# path -> (size, mtime_ns, ctime_ns, ino, sha256); ctime moves on any write, chmod or
# utime, so a file rewritten with its old size and mtime is read again
Hashes = dict[str, tuple[int, int, int, int, str]]
HASHES: Hashes = {}
SCANNED = ScanState()
_ONE_SCAN = threading.Lock()  # the delta state is one: scans run one at a time


def scan_diff(
    roots: tuple[str, ...],
    prev: dict[str, ScanRow],
    hashes: Hashes | None = None,
    inline: int = 0,
) -> Json:
    """Walk ``roots`` (as the user) and compare what is there with ``prev``
    (PID 1's rows for a delta, empty for a full scan).

    Returns ``{"changed": rows new or different, "keys": [mtime_ns, ctime_ns, ino] per
    changed row (null unless a file), "removed": paths of ``prev`` gone}``, so
    only differences cross the pipe to PID 1; with ``inline`` bytes, also
    ``"inline": {path: base64}`` of the files read for their hash, each in the
    order walked while the budget holds it, up to that many bytes in all (the
    snapshot after a turn then needs no ``pack`` of its own for them). A file whose (size, mtime_ns,
    ctime_ns, ino) is in ``hashes`` (PID 1's ``HASHES``; a test double keeps its
    own) is not read again, and if its mode is as before its row is not even
    rebuilt. Symlinks are recorded, never followed; devices,
    fifos and sockets are skipped. Entries are those under each root, not the
    root itself. The user's processes run meanwhile: an entry removed or renamed
    while it is walked is left out, as if the walk had come after.
    """
    changed: list[ScanRow] = []
    keys: list[list[int] | None] = []
    carried: dict[str, str] = {}
    seen: set[str] = set()
    old_row, cached, see = prev.get, (HASHES if hashes is None else hashes).get, seen.add
    is_reg, is_dir = stat.S_ISREG, stat.S_ISDIR
    with lending() as lent:
        for root in roots:
            stack = [root]
            while stack:
                for path, st in listing(stack.pop(), lent):
                    fmt = st.st_mode
                    mode = stat.S_IMODE(fmt)
                    old = old_row(path)
                    if not is_reg(fmt):
                        if is_dir(fmt):
                            stack.append(path)
                        row = _other_row(path, fmt, mode)
                        if row is not None:
                            see(path)
                            if row != old:
                                changed.append(row)
                                keys.append(None)
                        continue
                    see(path)
                    size, mtime, ctime, ino = st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino
                    hit = cached(path)
                    if hit is not None and hit[:4] == (size, mtime, ctime, ino):
                        if old is not None and old[1] == "file" and old[2] == mode:
                            continue  # unchanged: PID 1 keeps the row it has
                        digest = hit[4]
                    else:
                        read = _read_file(path, mode, size, mtime, ino, ctime, size <= inline)
                        if read is None:  # removed or renamed while walked
                            seen.discard(path)
                            continue
                        digest, ctime, carry = read
                        if carry is not None:
                            carried[path], inline = carry, inline - size
                    changed.append((path, "file", mode, size, digest, None))
                    keys.append([mtime, ctime, ino])
    removed = [p for p in prev if p not in seen]
    out: Json = {"changed": changed, "keys": keys, "removed": removed}
    if carried:
        out["inline"] = carried
    return out


def _read_file(
    path: str, mode: int, size: int, mtime: int, ino: int, ctime: int, keep: bool
) -> tuple[str, int, str | None] | None:
    """A file's sha256, its ctime after the read (``open_own``'s chmod of a file the user
    cannot read moves it) and, when ``keep``, the bytes hashed in base64 if they are the
    scanned size (else None: the file moved on); None if it was removed or renamed
    meanwhile."""
    data: bytes | None = None
    try:
        if keep:
            digest, data = small_file(path)
        else:
            digest = sha256_of(path)
        if not mode & 0o400:  # open_own's chmod moved ctime
            ctime = settled_ctime(path, size, mtime, ino, ctime)
    except FileNotFoundError:
        return None
    if data is None or len(data) != size:
        return digest, ctime, None
    return digest, ctime, binascii.b2a_base64(data, newline=False).decode()


def _other_row(path: str, fmt: int, mode: int) -> ScanRow | None:
    """The row of a directory or a symlink (its target read, never followed); None for a
    device, fifo or socket, or a symlink removed while walked."""
    if stat.S_ISDIR(fmt):
        return (path, "dir", mode, 0, None, None)
    if stat.S_ISLNK(fmt):
        try:
            return (path, "symlink", mode, 0, None, os.readlink(path))
        except FileNotFoundError:
            return None
    return None


def update(
    state: ScanState,
    roots: tuple[str, ...],
    diff: Json,
    *,
    delta: bool,
    hashes: Hashes | None = None,
) -> Json:
    """Take a ``scan_diff`` result as the new state (applied to the rows when
    ``delta``, else in their place) and the hash cache (``HASHES`` unless
    given); reply with the delta or every row, and the ``inline`` bytes the walk
    carried, if any."""
    if hashes is None:
        hashes = HASHES
    if not delta:
        state.rows = {}
        hashes.clear()
    changed = [cast(ScanRow, tuple(row)) for row in diff["changed"]]
    state.apply(changed, diff["removed"])
    for path in diff["removed"]:
        hashes.pop(path, None)
    for row, key in zip(changed, diff["keys"], strict=True):
        if key is None:
            hashes.pop(row[0], None)
        else:
            hashes[row[0]] = (row[3], key[0], key[1], key[2], cast(str, row[4]))
    # os.urandom as secrets.token_hex does, without its imports (hmac, random) at start
    since, state.token, state.roots = state.token, os.urandom(8).hex(), roots
    carried = {"inline": diff["inline"]} if diff.get("inline") else {}
    if not delta:
        return {"token": state.token, "entries": list(state.rows.values()), **carried}
    return {
        "token": state.token,
        "since": since,
        "changed": diff["changed"],
        "removed": diff["removed"],
        **carried,
    }


def op_scan(req: Json) -> Json:
    """The ``scan`` reply: a delta on ``since`` when PID 1 holds that token, else every row;
    with ``inline`` (bytes, at most ``MAX_SCAN_INLINE``) the small files it read too."""
    roots = check_roots(req.get("roots"))
    inline = req.get("inline", 0)
    if type(inline) is not int or not 0 <= inline <= MAX_SCAN_INLINE:
        raise AgentError(
            "invalid_input",
            f"inline must be an integer from 0 to {MAX_SCAN_INLINE} (bytes)",
            field="inline",
        )
    with _ONE_SCAN:
        delta = SCANNED.answers(req.get("since"), roots)
        diff = as_user_files(scan_diff, roots, SCANNED.rows if delta else {}, None, inline)
        return update(SCANNED, roots, diff, delta=delta)
