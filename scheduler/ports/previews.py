"""Preview URLs on the API side: made for a tenant's port, checked before any lookup.

``make_url`` signs a ``Preview`` (``sandgrid.wire.preview``) for the life the
caller asked (``SANDGRID_PORTS__URL_TTL_S`` by default, at most
``URL_MAX_TTL_S``: longer is 422 naming ``expires_in``). ``check`` verifies a
token with the preview key and the request's method first (a forged,
expired or read-only-refused token is 403 without a lookup and without
touching the sandbox), then that the session is still open (a closed one is
404: a URL stops working when its session closes) and has not revoked the URL
since it was made (``admit``: 403 ``url_revoked``, from the session's epochs
that the same lookup read, still without touching the sandbox).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sandgrid.errors import InvalidInput
from sandgrid.ops.ports import PortUrl, PortUrlRequest
from sandgrid.wire.preview import Preview, check_epochs, epochs_of, sign, verify
from sandgrid.wire.settings import PortSettings
from scheduler.ports.tunnel import Admit

__all__ = ["PREVIEW_PREFIX", "QUERY_TOKEN", "admit", "check", "make_url"]

#: Preview URLs are ``/p/<token>/<path>``.
PREVIEW_PREFIX = "/p/"
#: The query parameter that carries a token on any path instead (the Agents SDK's
#: ``ExposedPortEndpoint`` has a host, a port and a query, but no path).
QUERY_TOKEN = "sg_preview"


def make_url(
    key: bytes,
    settings: PortSettings,
    tenant: str,
    session: str,
    port: int,
    body: PortUrlRequest,
    base_url: str,
    epochs: Mapping[str, int],
) -> PortUrl:
    """A signed preview URL of ``port`` of ``session``, under the session's revocation
    ``epochs`` now (``SessionInfo.port_url_epochs``).

    Raises:
        InvalidInput: ``expires_in`` above ``SANDGRID_PORTS__URL_MAX_TTL_S``.
    """
    ttl = body.expires_in or settings.url_ttl_s
    if ttl > settings.url_max_ttl_s:
        raise InvalidInput(
            f"expires_in: {ttl} s is above the grid's longest, {settings.url_max_ttl_s} s",
            operation="ports.url",
            context={"field": "expires_in", "rule": f"<= {settings.url_max_ttl_s}"},
        )
    expires_at = int(time.time()) + ttl
    preview = Preview(tenant, session, port, expires_at, body.read_only, epochs_of(epochs, port))
    token = sign(key, preview)
    path = f"{PREVIEW_PREFIX}{token}/"
    return PortUrl(
        url=base_url.rstrip("/") + path,
        path=path,
        token=token,
        session=session,
        port=port,
        expires_at=float(preview.expires_at),
        methods=preview.methods,
        mode="read_only" if body.read_only else "read_write",
    )


def check(key: bytes, token: str, method: str) -> Preview:
    """What ``token`` allows for ``method`` (``sandgrid.wire.preview.verify``).

    Raises:
        Forbidden: forged, tampered, expired, or a method a read-only URL refuses.
    """
    # A WebSocket open is a GET: a read-only URL allows it (its messages are the app's).
    return verify(key, token, method)


def admit(preview: Preview) -> Admit:
    """The tunnel's check that ``preview``'s session has not revoked it since it was
    signed (``sandgrid.wire.preview.check_epochs``: 403 ``url_revoked``)."""

    def check_revoked(epochs: Mapping[str, int]) -> None:
        check_epochs(preview, epochs)

    return check_revoked
