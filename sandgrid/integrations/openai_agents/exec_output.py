"""Bytes-exact exec output over the grid's text results, and the truncation notice.

The grid's ``ExecResult`` carries ``stdout`` and ``stderr`` as text (bytes that
are not UTF-8 become U+FFFD), while the SDK's ``ExecResult`` is bytes: a binary
``cat`` or a program writing Latin-1 would come back changed. So the provider
runs each command under a small POSIX ``sh`` wrapper that pipes its stdout and
its stderr through ``base64`` (coreutils, in every grid image), and decodes them
here: the SDK gets the bytes the command wrote. The command's exit status is
kept in a file under ``/tmp`` (a few bytes) and becomes the wrapper's.

The cost: the grid's output cap (``quotas.output_bytes``) now counts base64
text, so about 3/4 of it is left for the command's own bytes. Whatever the cap
cut is never silent: the SDK's result has no flag for it, so
``SandgridExecResult`` carries ``stdout_truncated`` / ``stderr_truncated`` and a
line saying what was cut is appended to stderr, where the shell tool shows it
to the model.
"""

from __future__ import annotations

import base64
import binascii

from agents.sandbox.errors import ExecTransportError
from agents.sandbox.types import ExecResult

from sandgrid.errors import SandgridError
from sandgrid.models import ExecResult as GridExecResult

__all__ = [
    "EXACT_WRAPPER",
    "SandgridExecResult",
    "decode_exact",
    "transport_error",
    "truncation_notice",
    "wrap_exact",
]

EXACT_WRAPPER = (
    "f=$(mktemp) || exit 125; "
    '{ { "$@"; echo $? >"$f"; } 2>&1 1>&3 3>&- | base64 >&2; } 3>&1 | base64; '
    'rc=$(cat "$f"); rm -f "$f"; exit "${rc:-125}"'
)
"""``sh -c`` program: run ``"$@"``; its stdout base64 on stdout, its stderr base64 on stderr."""

_ARGV0 = "sandgrid-exact"


class SandgridExecResult(ExecResult):
    """The SDK's ``ExecResult`` plus what the grid's output cap cut."""

    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @classmethod
    def of(cls, out: bytes, err: bytes, code: int, cut: tuple[bool, bool]) -> SandgridExecResult:
        """The result, with ``truncation_notice`` appended to stderr when a stream was cut."""
        result = cls(stdout=out, stderr=err + truncation_notice(*cut), exit_code=code)
        result.stdout_truncated, result.stderr_truncated = cut
        return result


def transport_error(command: list[str], exc: SandgridError) -> ExecTransportError:
    """The SDK's error for a grid call that failed (its code and message kept)."""
    return ExecTransportError(
        command=command,
        context={"code": str(exc.code), "message": exc.message},
        cause=exc,
        retryable=exc.retryable,
    )


def wrap_exact(argv: list[str]) -> list[str]:
    """``argv`` run under the base64 wrapper (``decode_exact`` reads its result)."""
    return ["sh", "-c", EXACT_WRAPPER, _ARGV0, *argv]


def _unbase64(text: str, truncated: bool) -> tuple[bytes, bool]:
    """The bytes of one wrapped stream; a cut one decodes up to its last whole group."""
    compact = "".join(text.split())
    whole = len(compact) - len(compact) % 4
    if whole < len(compact):
        truncated = True
    try:
        return base64.b64decode(compact[:whole], validate=True), truncated
    except (binascii.Error, ValueError):
        # Not the wrapper's output (it could not start): hand the text on as it came.
        return text.encode(), truncated


def decode_exact(result: GridExecResult) -> tuple[bytes, bytes, bool, bool]:
    """(stdout, stderr, stdout_truncated, stderr_truncated) of a wrapped command's result."""
    out, out_cut = _unbase64(result.stdout, result.stdout_truncated)
    err, err_cut = _unbase64(result.stderr, result.stderr_truncated)
    return out, err, out_cut, err_cut


def truncation_notice(stdout_cut: bool, stderr_cut: bool) -> bytes:
    """The line appended to stderr when the grid's output cap cut a stream ("" if none)."""
    cut = [name for name, was in (("stdout", stdout_cut), ("stderr", stderr_cut)) if was]
    if not cut:
        return b""
    streams = " and ".join(cut)
    return (
        f"\n[sandgrid: {streams} truncated at the session's output cap "
        "(quotas.output_bytes); the rest was not kept]\n"
    ).encode()
