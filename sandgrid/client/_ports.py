"""The requests of exposed ports (issue 21.1, docs/ports.md): the preview URL, the port's base.

``port_url`` is one call (``POST /v1/sessions/{id}/ports/{port}/url``), and so
is ``revoke_port_urls`` (``DELETE /v1/sessions/{id}/ports/urls``);
``port_base`` is where ``Session.http(port)`` points its own httpx client: the
port route, which takes the tenant's token like every call. Pure: no I/O.
"""

from __future__ import annotations

from sandgrid.client._call import Call, parse_as
from sandgrid.errors import InvalidInput
from sandgrid.ops.ports import MAX_PORT, MIN_PORT, PortUrl, PortUrlRequest, PortUrlsRevoked

__all__ = ["check_port", "port_base", "port_url", "revoke_port_urls"]


def check_port(port: int) -> int:
    """``port`` if it is a TCP port number.

    Raises:
        InvalidInput: not an int in 1-65535 (before any round trip).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not MIN_PORT <= port <= MAX_PORT:
        raise InvalidInput(
            f"port: {port!r} is not a TCP port ({MIN_PORT}-{MAX_PORT})",
            operation="ports",
            context={"field": "port", "rule": f"an int, {MIN_PORT} <= port <= {MAX_PORT}"},
        )
    return port


def port_base(base_url: str, session_id: str, port: int) -> str:
    """The URL under which ``port`` of the session answers (ends in '/')."""
    return f"{base_url.rstrip('/')}/v1/sessions/{session_id}/ports/{check_port(port)}/"


def port_url(
    session_id: str, port: int, *, expires_in: int | None = None, read_only: bool = False
) -> Call[PortUrl]:
    """A signed preview URL of ``port`` (``PortUrl.url``): it works without the token, for
    a person or a browser, until ``expires_in`` seconds pass (the grid's default: an
    hour) or the session closes; ``read_only`` allows only GET and HEAD."""
    body = PortUrlRequest(expires_in=expires_in, read_only=read_only)
    path = f"/v1/sessions/{session_id}/ports/{check_port(port)}/url"
    return Call(
        "POST", path, parse_as(PortUrl), json=body.model_dump(exclude_none=True), idempotent=True
    )


def revoke_port_urls(session_id: str, port: int | None = None) -> Call[PortUrlsRevoked]:
    """Revoke every preview URL of the session made so far, of ``port`` only when given:
    each answers 403 (``url_revoked``) from now on, without reaching the sandbox; a URL
    made after works. Closing the session is not needed."""
    params = None if port is None else {"port": check_port(port)}
    path = f"/v1/sessions/{session_id}/ports/urls"
    return Call("DELETE", path, parse_as(PortUrlsRevoked), params=params)
