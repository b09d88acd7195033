"""The sections the API reads: the audit trail, the caps on streams and terminals, and
exposed ports (the preview URLs' key and life; a worker's port listener reads them too)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from sandgrid.wire.settings.defaults import (
    DEFAULT_AUDIT_COMMAND_CHARS,
    DEFAULT_AUDIT_EXPORT_INTERVAL_S,
    DEFAULT_AUDIT_STREAM_KEEP_S,
    DEFAULT_PORT_MAX_BYTES,
    DEFAULT_PORT_MAX_CONNECTIONS,
    DEFAULT_PORT_URL_MAX_TTL_S,
    DEFAULT_PORT_URL_TTL_S,
    DEFAULT_STREAM_LEASE_S,
    DEFAULT_STREAMS_PER_SESSION,
    DEFAULT_STREAMS_PER_TENANT,
    DEFAULT_TERMINALS_PER_SESSION,
    DEFAULT_TERMINALS_PER_TENANT,
    DEFAULT_WORKER_METRICS_ADDR,
)

__all__ = [
    "AuditSettings",
    "PortSettings",
    "StreamLimitSettings",
]


class AuditSettings(BaseModel):
    """The audit trail (``scheduler.audit``): what a record keeps, when it is exported."""

    command_chars: int = Field(
        DEFAULT_AUDIT_COMMAND_CHARS,
        ge=0,
        le=1024,
        description="SANDGRID_AUDIT__COMMAND_CHARS: first characters of a command kept beside "
        "its digest (0: the digest alone)",
    )
    export_interval_s: float = Field(
        DEFAULT_AUDIT_EXPORT_INTERVAL_S,
        gt=0,
        description="SANDGRID_AUDIT__EXPORT_INTERVAL_S: how often the API exports to the store",
    )
    stream_keep_s: float = Field(
        DEFAULT_AUDIT_STREAM_KEEP_S,
        ge=0,
        description="SANDGRID_AUDIT__STREAM_KEEP_S: records younger than this stay in Redis only",
    )


class StreamLimitSettings(BaseModel):
    """Streams (SSE: streamed exec, re-attach) and terminals open at once, grid-wide:
    429 above a cap (a terminal: close code 4429)."""

    per_tenant: int = Field(DEFAULT_STREAMS_PER_TENANT, ge=1)
    """SANDGRID_STREAMS__PER_TENANT: streams one tenant has open at once."""
    per_session: int = Field(DEFAULT_STREAMS_PER_SESSION, ge=1)
    """SANDGRID_STREAMS__PER_SESSION: streams open at once on one session."""
    terminals_per_tenant: int = Field(DEFAULT_TERMINALS_PER_TENANT, ge=1)
    """SANDGRID_STREAMS__TERMINALS_PER_TENANT: terminals one tenant has open at once."""
    terminals_per_session: int = Field(DEFAULT_TERMINALS_PER_SESSION, ge=1)
    """SANDGRID_STREAMS__TERMINALS_PER_SESSION: terminal sockets open on one session."""
    lease_s: float = Field(DEFAULT_STREAM_LEASE_S, ge=3)
    """SANDGRID_STREAMS__LEASE_S: a slot of an API process that died is free after this."""


class PortSettings(BaseModel):
    """Exposed ports: the worker's port listener, the caps, the preview URLs' key and life."""

    secret: str = Field(
        "",
        description="SANDGRID_PORTS__SECRET: the key preview URLs and the API's connections "
        "to a worker are signed with (API and workers alike); empty: derived from the grid's "
        "MinIO secret key, which both already hold",
    )
    listen_addr: str = Field(
        DEFAULT_WORKER_METRICS_ADDR,
        description="SANDGRID_PORTS__LISTEN_ADDR: where a worker accepts the API's port "
        "connections (loopback unless an operator names another address)",
    )
    listen_port: int = Field(
        0, ge=0, le=65535, description="SANDGRID_PORTS__LISTEN_PORT (0: any free port)"
    )
    max_connections: int = Field(
        DEFAULT_PORT_MAX_CONNECTIONS,
        ge=1,
        description="SANDGRID_PORTS__MAX_CONNECTIONS: a session's port connections open at "
        "once (beyond: 429)",
    )
    max_bytes: int = Field(
        DEFAULT_PORT_MAX_BYTES,
        ge=1,
        description="SANDGRID_PORTS__MAX_BYTES: bytes a session's port connections may move "
        "in all, both ways (beyond: the connection is cut, new ones 429)",
    )
    url_ttl_s: int = Field(
        DEFAULT_PORT_URL_TTL_S, ge=1, description="SANDGRID_PORTS__URL_TTL_S: default life"
    )
    url_max_ttl_s: int = Field(
        DEFAULT_PORT_URL_MAX_TTL_S,
        ge=1,
        description="SANDGRID_PORTS__URL_MAX_TTL_S: the longest a preview URL may live",
    )
    connect_timeout_s: float = Field(
        5.0,
        gt=0,
        description="SANDGRID_PORTS__CONNECT_TIMEOUT_S: the API's connection to the owning "
        "worker and its answer (the sandbox port connected or refused) within this",
    )
