"""Exposed ports (issue 21.1): the preview URL request and its answer.

A port route (``/v1/sessions/{id}/ports/{port}/{path}``) is not a turn: it
forwards bytes to a TCP port on the sandbox's loopback through the worker that
owns the session (docs/ports.md). What crosses the HTTP wire as JSON is only
the preview URL's request and its answer, and the answer of a revocation;
all are here, with the rule every port number follows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import WireModel

__all__ = [
    "MAX_PORT",
    "MIN_PORT",
    "READ_METHODS",
    "WRITE_METHODS",
    "PortUrl",
    "PortUrlRequest",
    "PortUrlsRevoked",
]

MIN_PORT = 1
MAX_PORT = 65535
#: What a read-only preview URL allows.
READ_METHODS: tuple[str, ...] = ("GET", "HEAD")
#: What the port route forwards besides those (and WebSocket upgrades, which are GETs).
WRITE_METHODS: tuple[str, ...] = ("POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class PortUrlRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/ports/{port}/url``: how long, and for which methods."""

    expires_in: int | None = Field(
        None,
        ge=1,
        description="seconds the URL works (default SANDGRID_PORTS__URL_TTL_S, at most "
        "SANDGRID_PORTS__URL_MAX_TTL_S)",
    )
    read_only: bool = Field(False, description="allow only GET and HEAD (and WebSocket opens)")


class PortUrl(WireModel):
    """A signed preview URL of one port of one session: it carries no tenant token."""

    url: str = Field(description="absolute URL of the port's root, ending in '/'")
    path: str = Field(description="the same, as a path on the API: /p/<token>/")
    token: str = Field(description="the signed token the path carries")
    session: str
    port: int
    expires_at: float = Field(description="Unix time after which the URL answers 403")
    methods: tuple[str, ...] = Field(description="the HTTP methods it allows")
    mode: Literal["read_only", "read_write"]


class PortUrlsRevoked(WireModel):
    """Answer of ``DELETE /v1/sessions/{id}/ports/urls``: every preview URL of the
    session made before (of ``port`` only, when it is set) now answers 403
    ``url_revoked``; a URL made after works."""

    session: str
    port: int | None = Field(description="the port whose URLs were revoked; null: every port")
    epochs: dict[str, int] = Field(
        description="the session's revocation epochs now ('*': every port, else by port)"
    )
