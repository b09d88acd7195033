"""An operator's bearer token, kept in a file: the metrics token, the admin token.

Operators' routes take no tenant token: ``GET /v1/metrics/targets`` takes the
token of ``SANDGRID_METRICS_TOKEN_FILE``, and ``POST``/``DELETE /v1/types`` the
token of ``SANDGRID_ADMIN_TOKEN_FILE``. Each file is read on each call, so a
rotated token applies at once; with no file configured every call is refused;
tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from sandgrid.errors import AuthError

__all__ = ["check_file_token", "file_token_matches"]


def _expected(path: Path | None, setting: str, operation: str) -> str:
    if path is None:
        raise AuthError(f"no {operation} token configured ({setting})", operation=operation)
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise AuthError(f"the {operation} token file is unreadable", operation=operation) from exc
    if not token:
        raise AuthError(f"the {operation} token file is empty", operation=operation)
    return token


def check_file_token(given: str, path: Path | None, *, setting: str, operation: str) -> None:
    """Refuse ``given`` unless it is the token in ``path`` (401).

    Raises:
        AuthError: no token given, a wrong one, or none configured (named by ``setting``).
    """
    expected = _expected(path, setting, operation)
    if not given:
        raise AuthError("missing bearer token", operation=operation)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise AuthError(f"not the {operation} token", operation=operation)


def file_token_matches(given: str, path: Path | None) -> bool:
    """Whether ``given`` is the token in ``path`` (False when none is configured)."""
    try:
        check_file_token(given, path, setting="", operation="admin")
    except AuthError:
        return False
    return True
