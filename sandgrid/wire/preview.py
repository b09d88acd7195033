"""Signed preview URLs of a session's port (issue 21.1): made and checked by the API.

A token is ``<payload>.<signature>``, both base64url without padding: the
payload is the compact JSON ``{"v": 2, "t": tenant, "s": session, "p": port,
"e": expiry (Unix s), "m": "r"|"w", "g": [every-port epoch, this port's epoch]}``
and the signature is HMAC-SHA256 of the payload's text under the grid's
preview key (``keys.port_key``). The token
names the session, not the worker: a session whose owner changes keeps its
URLs. It never carries the tenant's token; what it reveals (the tenant's name,
the session id, the port) is what the URL's holder may reach anyway.

``verify`` checks the signature (constant time) before it reads a field, then
the expiry, then the method; a tampered, truncated or re-signed token, or one
made under another key, is ``Forbidden`` (403) with a code saying which. That
the session is still open is the route's check (it asks the registry).

Revocation (``DELETE /v1/sessions/{id}/ports/urls``) raises an epoch kept in
the session's record (``SessionInfo.port_url_epochs``: ``"*"`` for every
port, else by port number); a token signed under other epochs than the
session's now is revoked (``check_epochs``), with no list of tokens kept. A
version 1 token (no ``g``) is of epochs ``(0, 0)``: the first revocation ends it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sandgrid.errors import ErrorCode, Forbidden
from sandgrid.ops.ports import READ_METHODS, WRITE_METHODS

__all__ = [
    "ALL_PORTS",
    "MAX_TOKEN_CHARS",
    "Preview",
    "check_epochs",
    "epochs_of",
    "sign",
    "verify",
]

#: Longer tokens are refused unread (a session id is ~34 characters).
MAX_TOKEN_CHARS = 1024
_MODES = {"r": READ_METHODS, "w": READ_METHODS + WRITE_METHODS}
#: The key of ``SessionInfo.port_url_epochs`` that revokes the URLs of every port.
ALL_PORTS = "*"


@dataclass(frozen=True)
class Preview:
    """What a valid token allows: one port of one session of one tenant, until ``expires_at``."""

    tenant: str
    session: str
    port: int
    expires_at: int
    read_only: bool
    #: The session's revocation epochs when it was signed: every port's, this port's.
    epochs: tuple[int, int] = (0, 0)

    @property
    def methods(self) -> tuple[str, ...]:
        return _MODES["r" if self.read_only else "w"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def sign(key: bytes, preview: Preview) -> str:
    """The token of ``preview`` under ``key``."""
    body = {
        "v": 2,
        "t": preview.tenant,
        "s": preview.session,
        "p": preview.port,
        "e": preview.expires_at,
        "m": "r" if preview.read_only else "w",
        "g": list(preview.epochs),
    }
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{payload}.{_mac(key, payload)}"


def _refused(code: ErrorCode, message: str, **context: object) -> Forbidden:
    return Forbidden(message, code=code, operation="ports.preview", context=dict(context))


def verify(key: bytes, token: str, method: str, *, now: float | None = None) -> Preview:
    """The preview ``token`` allows, for a request of ``method``.

    Raises:
        Forbidden: ``signature_invalid`` (malformed, tampered, another key),
            ``url_expired``, or ``method_not_allowed`` (a read-only URL and
            a method other than GET or HEAD).
    """
    payload, dot, mac = token.partition(".")
    if len(token) > MAX_TOKEN_CHARS or not dot or not payload or not mac:
        raise _refused(ErrorCode.SIGNATURE_INVALID, "preview URL: malformed token")
    if not hmac.compare_digest(_mac(key, payload).encode(), mac.encode()):
        raise _refused(ErrorCode.SIGNATURE_INVALID, "preview URL: the signature does not match")
    try:
        body = json.loads(_unb64(payload))
        preview = Preview(
            tenant=str(body["t"]),
            session=str(body["s"]),
            port=int(body["p"]),
            expires_at=int(body["e"]),
            read_only=body["m"] == "r",
            epochs=_epochs(body.get("g", (0, 0))),
        )
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:  # signed by us: never
        raise _refused(ErrorCode.SIGNATURE_INVALID, "preview URL: unreadable token") from exc
    if (time.time() if now is None else now) >= preview.expires_at:
        raise _refused(ErrorCode.URL_EXPIRED, "preview URL: expired", expired_at=preview.expires_at)
    if method.upper() not in preview.methods:
        raise _refused(
            ErrorCode.METHOD_NOT_ALLOWED,
            f"preview URL: read-only, {method.upper()} is not allowed",
            allowed=list(preview.methods),
        )
    return preview


def _epochs(raw: object) -> tuple[int, int]:
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise ValueError("g: not two epochs")
    return int(raw[0]), int(raw[1])


def epochs_of(epochs: Mapping[str, int], port: int) -> tuple[int, int]:
    """The revocation epochs a URL of ``port`` is signed under now: every port's, the port's."""
    return int(epochs.get(ALL_PORTS, 0)), int(epochs.get(str(port), 0))


def check_epochs(preview: Preview, epochs: Mapping[str, int]) -> None:
    """Refuse ``preview`` if its session revoked its URLs since it was signed.

    Args:
        preview: a verified token.
        epochs: the session's ``port_url_epochs``, as its record holds them now.

    Raises:
        Forbidden: ``url_revoked``.
    """
    if preview.epochs != epochs_of(epochs, preview.port):
        raise _refused(ErrorCode.URL_REVOKED, "preview URL: revoked", port=preview.port)
