"""Settings of the grid, read once per process from ``SANDGRID_*`` variables.

Nested fields use ``__``: ``SANDGRID_MINIO__ENDPOINT=127.0.0.1:9000``.

``Settings`` is the root; its sections are in ``worker`` (a node's), ``api`` (the
API's) and here (``MinioSettings``, the store both use); every default is a named
constant of ``defaults``. All are re-exported here.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandgrid.wire.settings.api import AuditSettings, PortSettings, StreamLimitSettings
from sandgrid.wire.settings.defaults import (
    DEFAULT_API_HOST,
    DEFAULT_API_PORT,
    DEFAULT_API_THREADS,
    DEFAULT_AUDIT_COMMAND_CHARS,
    DEFAULT_AUDIT_EXPORT_INTERVAL_S,
    DEFAULT_AUDIT_STREAM_KEEP_S,
    DEFAULT_AUTH_CACHE_S,
    DEFAULT_BATCH_TTL_S,
    DEFAULT_CLOSED_TTL_S,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_IDLE_TTL_S,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LOG_FORMAT,
    DEFAULT_LOG_LEVEL,
    DEFAULT_LOST_CHECK_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MINIO_ENDPOINT,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_TOTAL,
    DEFAULT_PORT_MAX_BYTES,
    DEFAULT_PORT_MAX_CONNECTIONS,
    DEFAULT_PORT_URL_MAX_TTL_S,
    DEFAULT_PORT_URL_TTL_S,
    DEFAULT_REAP_INTERVAL_S,
    DEFAULT_REDIS_URL,
    DEFAULT_RESULT_EXPIRES_S,
    DEFAULT_SNAPSHOT_CARRY_BYTES,
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_GC_INTERVAL_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_MAX_BYTES,
    DEFAULT_SNAPSHOT_MAX_FILES,
    DEFAULT_SNAPSHOT_THREADS,
    DEFAULT_STREAM_LEASE_S,
    DEFAULT_STREAMS_PER_SESSION,
    DEFAULT_STREAMS_PER_TENANT,
    DEFAULT_TERMINALS_PER_SESSION,
    DEFAULT_TERMINALS_PER_TENANT,
    DEFAULT_TURN_MARGIN_S,
    DEFAULT_TYPES_FILE,
    DEFAULT_TYPES_POLL_S,
    DEFAULT_VISIBILITY_TIMEOUT_S,
    DEFAULT_WARM_BASES,
    DEFAULT_WARM_BUILDS,
    DEFAULT_WORKER_METRICS_ADDR,
    DEFAULT_WORKER_METRICS_PORT,
    SHIPPED_MINIO_ACCESS_KEY,
    SHIPPED_MINIO_SECRET_KEY,
)
from sandgrid.wire.settings.worker import (
    EgressSettings,
    ImageSettings,
    MemorySettings,
    SnapshotSettings,
    TemplateSettings,
    WorkerSettings,
)

__all__ = [
    "DEFAULT_API_HOST",
    "DEFAULT_API_PORT",
    "DEFAULT_API_THREADS",
    "DEFAULT_AUDIT_COMMAND_CHARS",
    "DEFAULT_AUDIT_EXPORT_INTERVAL_S",
    "DEFAULT_AUDIT_STREAM_KEEP_S",
    "DEFAULT_AUTH_CACHE_S",
    "DEFAULT_BATCH_TTL_S",
    "DEFAULT_CLOSED_TTL_S",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_IDLE_TTL_S",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_LOG_FORMAT",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_LOST_CHECK_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MINIO_ENDPOINT",
    "DEFAULT_POOL_MAX",
    "DEFAULT_POOL_TOTAL",
    "DEFAULT_PORT_MAX_BYTES",
    "DEFAULT_PORT_MAX_CONNECTIONS",
    "DEFAULT_PORT_URL_MAX_TTL_S",
    "DEFAULT_PORT_URL_TTL_S",
    "DEFAULT_REAP_INTERVAL_S",
    "DEFAULT_REDIS_URL",
    "DEFAULT_RESULT_EXPIRES_S",
    "DEFAULT_SNAPSHOT_CARRY_BYTES",
    "DEFAULT_SNAPSHOT_GC_GRACE_S",
    "DEFAULT_SNAPSHOT_GC_INTERVAL_S",
    "DEFAULT_SNAPSHOT_KEEP",
    "DEFAULT_SNAPSHOT_MAX_BYTES",
    "DEFAULT_SNAPSHOT_MAX_FILES",
    "DEFAULT_SNAPSHOT_THREADS",
    "DEFAULT_STREAMS_PER_SESSION",
    "DEFAULT_STREAMS_PER_TENANT",
    "DEFAULT_STREAM_LEASE_S",
    "DEFAULT_TERMINALS_PER_SESSION",
    "DEFAULT_TERMINALS_PER_TENANT",
    "DEFAULT_TURN_MARGIN_S",
    "DEFAULT_TYPES_FILE",
    "DEFAULT_TYPES_POLL_S",
    "DEFAULT_VISIBILITY_TIMEOUT_S",
    "DEFAULT_WARM_BASES",
    "DEFAULT_WARM_BUILDS",
    "DEFAULT_WORKER_METRICS_ADDR",
    "DEFAULT_WORKER_METRICS_PORT",
    "SHIPPED_MINIO_ACCESS_KEY",
    "SHIPPED_MINIO_SECRET_KEY",
    "AuditSettings",
    "EgressSettings",
    "ImageSettings",
    "MemorySettings",
    "MinioSettings",
    "PortSettings",
    "Settings",
    "SnapshotSettings",
    "StreamLimitSettings",
    "TemplateSettings",
    "WorkerSettings",
    "get_settings",
]


class MinioSettings(BaseModel):
    endpoint: str = Field(DEFAULT_MINIO_ENDPOINT, description="SANDGRID_MINIO__ENDPOINT")
    access_key: str = Field(SHIPPED_MINIO_ACCESS_KEY, description="SANDGRID_MINIO__ACCESS_KEY")
    secret_key: str = Field(SHIPPED_MINIO_SECRET_KEY, description="SANDGRID_MINIO__SECRET_KEY")
    bucket: str = Field("sandgrid-snapshots", description="SANDGRID_MINIO__BUCKET")
    secure: bool = Field(False, description="SANDGRID_MINIO__SECURE")


class Settings(BaseSettings):
    """One settings object per process (see ``get_settings``)."""

    model_config = SettingsConfigDict(env_prefix="SANDGRID_", env_nested_delimiter="__")

    redis_url: str = Field(DEFAULT_REDIS_URL, description="SANDGRID_REDIS_URL")
    tenants_file: Path | None = Field(None, description="SANDGRID_TENANTS_FILE (JSON)")
    lease_ttl_s: float = Field(DEFAULT_LEASE_TTL_S, description="SANDGRID_LEASE_TTL_S")
    heartbeat_s: float = Field(DEFAULT_HEARTBEAT_S, description="SANDGRID_HEARTBEAT_S")
    visibility_timeout_s: int = Field(
        DEFAULT_VISIBILITY_TIMEOUT_S, description="SANDGRID_VISIBILITY_TIMEOUT_S"
    )
    queue_depth_limit: int = Field(500, description="SANDGRID_QUEUE_DEPTH_LIMIT (429 above)")
    api_host: str = Field(DEFAULT_API_HOST, description="SANDGRID_API_HOST (sandgrid serve)")
    api_port: int = Field(DEFAULT_API_PORT, description="SANDGRID_API_PORT (sandgrid serve)")
    api_threads: int = Field(
        DEFAULT_API_THREADS, ge=4, description="SANDGRID_API_THREADS: turns waited on at once"
    )
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES, ge=1024, description="SANDGRID_MAX_BODY_BYTES (413 above)"
    )
    result_expires_s: int = Field(
        DEFAULT_RESULT_EXPIRES_S, description="SANDGRID_RESULT_EXPIRES_S: Celery results kept"
    )
    turn_margin_s: float = Field(
        DEFAULT_TURN_MARGIN_S,
        description="SANDGRID_TURN_MARGIN_S: extra wait (queue, restore, snapshot)",
    )
    # Parallel turns (issue 20): how long a call waits for a slot of its session.
    slot_wait_s: float = Field(
        30.0,
        ge=0,
        description="SANDGRID_SLOT_WAIT_S: a call waits this long for a free slot of its "
        "session (quotas.max_parallel_turns), then 429 session_busy",
    )
    lost_check_s: float = Field(
        DEFAULT_LOST_CHECK_S,
        gt=0,
        description="SANDGRID_LOST_CHECK_S: how often a waiting turn checks its worker's heartbeat",
    )
    auth_cache_s: float = Field(
        DEFAULT_AUTH_CACHE_S, ge=0, description="SANDGRID_AUTH_CACHE_S: token lookups cached"
    )
    closed_ttl_s: float = Field(
        DEFAULT_CLOSED_TTL_S, description="SANDGRID_CLOSED_TTL_S: closed session records kept"
    )
    batch_ttl_s: float = Field(
        DEFAULT_BATCH_TTL_S, gt=0, description="SANDGRID_BATCH_TTL_S: batch records kept"
    )
    session_sweep_s: float = Field(
        5.0, gt=0, description="SANDGRID_SESSION_SWEEP_S: how often the API closes expired sessions"
    )
    image_prefix: str = Field("sandgrid/sandbox-", description="SANDGRID_IMAGE_PREFIX")
    minio: MinioSettings = Field(default_factory=MinioSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    streams: StreamLimitSettings = Field(default_factory=StreamLimitSettings)  # issue 23.7
    ports: PortSettings = Field(default_factory=PortSettings)  # issue 21.1
    images: ImageSettings = Field(default_factory=ImageSettings)  # 25.3
    templates: TemplateSettings = Field(default_factory=TemplateSettings)  # 25.2
    # Logs (issue 23, item 5): sandgrid.wire.logs; docs/operations.md, Logs.
    log_format: Literal["json", "text"] = Field(
        DEFAULT_LOG_FORMAT,
        description="SANDGRID_LOG_FORMAT: json (one object a line) or text (one line a record)",
    )
    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"], BeforeValidator(lambda v: str(v).upper())
    ] = Field(
        DEFAULT_LOG_LEVEL,
        description="SANDGRID_LOG_LEVEL of the API (or serve --log-level), workers and Flower",
    )
    # ---- 23.18 / 23.19: operators' credentials (docs/operations.md) ----
    metrics_token_file: Path | None = Field(
        None,
        description="SANDGRID_METRICS_TOKEN_FILE: the file holding the bearer token of "
        "GET /v1/metrics/targets (Prometheus service discovery); unset: the route refuses all",
    )
    allow_insecure_defaults: bool = Field(
        False,
        description="SANDGRID_ALLOW_INSECURE_DEFAULTS: let a worker or the API start with the "
        "shipped MinIO credentials or a Redis URL without a password (tests only)",
    )
    # ---- 20.3: AgentScope Runtime's remote API (docs/integrations.md) ----
    agentscope_grid_type: str = Field(
        "python",
        min_length=1,
        max_length=64,
        description="SANDGRID_AGENTSCOPE_GRID_TYPE: the grid type (python image) serving "
        "AgentScope's base and filesystem sandboxes; python-gvisor runs them under runsc",
    )
    # ---- 25.1 / 25.5: sandbox types as data (docs/operations.md, "The types file") ----
    types_file: Path | None = Field(
        DEFAULT_TYPES_FILE,
        description="SANDGRID_TYPES_FILE: the TOML file of the grid's sandbox types, seeded "
        "into the registry when the API starts (unset or missing: the registry's types only)",
    )
    types_poll_s: float = Field(
        DEFAULT_TYPES_POLL_S,
        gt=0,
        description="SANDGRID_TYPES_POLL_S: how often a worker node (and an API process's "
        "cache) looks at the catalog's version counter for added or removed types",
    )
    admin_token_file: Path | None = Field(
        None,
        description="SANDGRID_ADMIN_TOKEN_FILE: the file holding the operator's bearer token "
        "of POST and DELETE /v1/types; unset: those routes refuse all",
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once from the environment."""
    return Settings()
