"""The ``sh`` programs the AgentScope backend runs in a grid sandbox, and how their output reads.

AgentScope's ``BackendBase.exec_shell`` takes an argv, a working directory
anywhere in the sandbox and answers raw bytes; the grid's exec runs in
``/workspace`` (or below it) and answers text, where bytes that are not UTF-8
would become U+FFFD. So every command runs under ``RUN``: it changes to the
asked directory (a missing one exits 127, as AgentScope's ``LocalBackend``
answers a program it cannot start), runs the argv, and sends its stdout and its
stderr base64-encoded; ``decode`` turns them back into the bytes the program
wrote. The exit status travels in a file under ``/tmp``.

``READ`` and ``PROBE`` say why a path cannot be read as a file with an exit
status (``ENOENT``, ``EISDIR``), so that the backend raises the exception
AgentScope's own backends raise (``FileNotFoundError``, ``IsADirectoryError``).
``WRITE`` writes base64 stdin to a path, making its parents, for paths the grid's
file API does not serve (outside ``/workspace``).
"""

from __future__ import annotations

import base64
import binascii
import errno

__all__ = ["PROBE", "READ", "RUN", "WRITE", "decode", "run_argv"]

RUN = (
    'cd -- "$1" 2>/dev/null || { echo "sandgrid: no directory $1" >&2; exit 127; }; shift; '
    "s=$(mktemp) || exit 125; "
    '{ { "$@"; echo $? >"$s"; } 2>&1 1>&3 3>&- | base64 -w0 >&2; } 3>&1 | base64 -w0; '
    'code=$(cat "$s"); rm -f -- "$s"; exit "${code:-125}"'
)
"""``sh -c RUN sandgrid-agentscope DIR ARGV...``: ``ARGV`` in ``DIR``, both streams base64."""

_WHY = (
    f'if [ -d "$1" ]; then exit {errno.EISDIR}; fi; '
    f'if [ ! -e "$1" ]; then exit {errno.ENOENT}; fi; '
)
READ = _WHY + 'exec cat -- "$1"'
"""``sh -c READ sandgrid-agentscope PATH``: the file's bytes, or an errno as the exit status."""

PROBE = _WHY + "exit 0"
"""``sh -c PROBE sandgrid-agentscope PATH``: 0 when ``PATH`` is there and not a directory."""

WRITE = (
    f'if [ -d "$1" ]; then exit {errno.EISDIR}; fi; '
    'mkdir -p -- "$(dirname -- "$1")" && base64 -d >"$1"'
)
"""``sh -c WRITE sandgrid-agentscope PATH`` with base64 stdin: the decoded bytes at ``PATH``
(exit ``EISDIR`` when a directory is there)."""

_ARGV0 = "sandgrid-agentscope"


def run_argv(program: str, *args: str) -> list[str]:
    """The grid argv that runs the ``sh`` ``program`` with its positional ``args``."""
    return ["sh", "-c", program, _ARGV0, *args]


def decode(text: str, cut: bool) -> tuple[bytes, bool]:
    """The bytes of one ``RUN`` stream, and whether any of them is missing.

    A stream cut by the grid's output cap decodes up to its last whole base64
    group (``cut`` is then True). Text that is not base64 at all (``RUN`` could not
    start, or ``cd`` failed before it) is handed on as it came.
    """
    compact = "".join(text.split())
    whole = len(compact) - len(compact) % 4
    try:
        data = base64.b64decode(compact[:whole], validate=True)
    except (binascii.Error, ValueError):
        return text.encode(), cut
    return data, cut or whole < len(compact)
