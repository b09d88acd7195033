"""Settings of the grid, read once per process from ``SANDGRID_*`` variables.

Nested fields use ``__``: ``SANDGRID_MINIO__ENDPOINT=127.0.0.1:9000``.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    "DEFAULT_PORT_MAX_BYTES",
    "DEFAULT_PORT_MAX_CONNECTIONS",
    "DEFAULT_PORT_URL_MAX_TTL_S",
    "DEFAULT_PORT_URL_TTL_S",
    "DEFAULT_REAP_INTERVAL_S",
    "DEFAULT_REDIS_URL",
    "DEFAULT_RESULT_EXPIRES_S",
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

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_MINIO_ENDPOINT = "127.0.0.1:9000"
DEFAULT_LEASE_TTL_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
DEFAULT_VISIBILITY_TIMEOUT_S = 3900
DEFAULT_IDLE_TTL_S = 300.0
DEFAULT_REAP_INTERVAL_S = 5.0
#: The most warm sandboxes of one type demand may raise a node's pool to (22.3).
DEFAULT_POOL_MAX = 8
DEFAULT_SNAPSHOT_GC_INTERVAL_S = 600.0
DEFAULT_SNAPSHOT_KEEP = 5
DEFAULT_SNAPSHOT_GC_GRACE_S = 3600.0
DEFAULT_SNAPSHOT_MAX_FILES = 100_000
DEFAULT_SNAPSHOT_MAX_BYTES = 4 << 30
DEFAULT_SNAPSHOT_THREADS = 16
DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8700
DEFAULT_MAX_BODY_BYTES = 64 << 20
DEFAULT_RESULT_EXPIRES_S = 3600
DEFAULT_TURN_MARGIN_S = 30.0
DEFAULT_API_THREADS = 256
DEFAULT_AUTH_CACHE_S = 5.0
DEFAULT_LOST_CHECK_S = 0.25
DEFAULT_CLOSED_TTL_S = 86400.0
DEFAULT_BATCH_TTL_S = 7 * 86400.0
DEFAULT_WORKER_METRICS_PORT = 9810


def _shipped_types_file() -> Path:
    """The shipped types file (25.1): ``deploy/types.toml`` of the checkout, else the copy
    an installed package put under ``<prefix>/share/sandgrid/`` (``data-files``)."""
    checkout = Path(__file__).resolve().parents[2] / "deploy" / "types.toml"
    installed = Path(sys.prefix) / "share" / "sandgrid" / "types.toml"
    return checkout if checkout.is_file() or not installed.is_file() else installed


DEFAULT_TYPES_FILE = _shipped_types_file()
DEFAULT_TYPES_POLL_S = 1.0
# 23.3: every grid listener binds loopback unless an operator names another address.
DEFAULT_WORKER_METRICS_ADDR = "127.0.0.1"
# 23.19: the well-known credentials a worker or the API refuses to start with
# (sandgrid.wire.credentials) unless SANDGRID_ALLOW_INSECURE_DEFAULTS is set.
SHIPPED_MINIO_ACCESS_KEY = "sandgrid"
SHIPPED_MINIO_SECRET_KEY = "sandgrid-secret"
DEFAULT_AUDIT_COMMAND_CHARS = 80
DEFAULT_AUDIT_EXPORT_INTERVAL_S = 60.0
DEFAULT_AUDIT_STREAM_KEEP_S = 3600.0
# Logs (issue 23, item 5): one line per event, JSON unless told otherwise.
DEFAULT_LOG_FORMAT: Literal["json", "text"] = "json"
DEFAULT_LOG_LEVEL: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class MinioSettings(BaseModel):
    endpoint: str = Field(DEFAULT_MINIO_ENDPOINT, description="SANDGRID_MINIO__ENDPOINT")
    access_key: str = Field(SHIPPED_MINIO_ACCESS_KEY, description="SANDGRID_MINIO__ACCESS_KEY")
    secret_key: str = Field(SHIPPED_MINIO_SECRET_KEY, description="SANDGRID_MINIO__SECRET_KEY")
    bucket: str = Field("sandgrid-snapshots", description="SANDGRID_MINIO__BUCKET")
    secure: bool = Field(False, description="SANDGRID_MINIO__SECURE")


class SnapshotSettings(BaseModel):
    """Retention, garbage collection and limits of the workspace snapshot store."""

    keep: int = Field(
        DEFAULT_SNAPSHOT_KEEP, ge=1, description="SANDGRID_WORKER__SNAPSHOTS__KEEP per session"
    )
    gc_grace_s: float = Field(
        DEFAULT_SNAPSHOT_GC_GRACE_S,
        ge=60,
        description="SANDGRID_WORKER__SNAPSHOTS__GC_GRACE_S: younger unreferenced blobs are kept",
    )
    max_files: int = Field(
        DEFAULT_SNAPSHOT_MAX_FILES, ge=1, description="SANDGRID_WORKER__SNAPSHOTS__MAX_FILES"
    )
    max_bytes: int = Field(
        DEFAULT_SNAPSHOT_MAX_BYTES, ge=1, description="SANDGRID_WORKER__SNAPSHOTS__MAX_BYTES"
    )
    gc_interval_s: float = Field(
        DEFAULT_SNAPSHOT_GC_INTERVAL_S,
        gt=0,
        description="SANDGRID_WORKER__SNAPSHOTS__GC_INTERVAL_S: each tenant a node served is "
        "collected (closed sessions' snapshots, unreferenced blobs) at most this often, grid-wide",
    )
    threads: int = Field(
        DEFAULT_SNAPSHOT_THREADS,
        ge=1,
        le=128,
        description="SANDGRID_WORKER__SNAPSHOTS__THREADS: parallel blob transfers",
    )


class EgressSettings(BaseModel):
    """The worker's egress proxy (docs/network.md)."""

    state_dir: Path = Field(
        Path("/var/lib/sandgrid/egress"),
        description="SANDGRID_WORKER__EGRESS__STATE_DIR: one directory per sandbox, holding "
        "the Unix socket of its proxy, bind-mounted into the sandbox",
    )
    port: int = Field(
        3128, ge=1, le=65535, description="SANDGRID_WORKER__EGRESS__PORT: the sandbox's proxy port"
    )
    hosts: dict[str, str] = Field(
        default_factory=dict,
        description="SANDGRID_WORKER__EGRESS__HOSTS (JSON name -> address): resolver "
        "override, for tests on loopback only",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="SANDGRID_WORKER__EGRESS__CONNECT_TIMEOUT_S"
    )
    audit_max: int = Field(
        1000, ge=10, description="SANDGRID_WORKER__EGRESS__AUDIT_MAX: attempts kept per session"
    )
    audit_ttl_s: int = Field(
        7 * 86400,
        ge=60,
        description="SANDGRID_WORKER__EGRESS__AUDIT_TTL_S: the audit and usage expire this "
        "long after the session's last attempt",
    )
    # issue 23.3 (egress): the host's own addresses and the grid's ports are special
    service_ports: list[int] = Field(
        default_factory=lambda: [5555, 9001],
        description="SANDGRID_WORKER__EGRESS__SERVICE_PORTS (JSON list): grid ports besides "
        "those the settings name (Redis, MinIO, the API, metrics): Flower, the MinIO console",
    )
    host_refresh_s: float = Field(
        30.0,
        gt=0,
        description="SANDGRID_WORKER__EGRESS__HOST_REFRESH_S: the host's interface addresses "
        "are read again when older than this",
    )
    # issue 23.8 (egress): no connection holds a worker socket unbounded
    handshake_timeout_s: float = Field(
        10.0,
        gt=0,
        description="SANDGRID_WORKER__EGRESS__HANDSHAKE_TIMEOUT_S: the request (CONNECT line, "
        "HTTP head, SOCKS greeting and request) must arrive within this",
    )
    idle_timeout_s: float = Field(
        600.0,
        gt=0,
        description="SANDGRID_WORKER__EGRESS__IDLE_TIMEOUT_S: an established connection with "
        "no byte either way for this long is closed",
    )
    max_open: int = Field(
        128,
        ge=1,
        description="SANDGRID_WORKER__EGRESS__MAX_OPEN: connections of one sandbox open at "
        "once, counted from accept (beyond: refused at once)",
    )


# Memory snapshots (issue 24): gVisor checkpoint/restore of a paused session.
class MemorySettings(BaseModel):
    """Where a node's runsc checkpoints and restores sandboxes (docs/memory.md)."""

    runsc_path: Path = Field(
        Path("/var/lib/sandgrid/bin/runsc"),
        description="SANDGRID_WORKER__MEMORY__RUNSC_PATH: the runsc that Docker runs",
    )
    runsc_root: Path = Field(
        Path("/run/docker/runtime-runc/moby"),
        description="SANDGRID_WORKER__MEMORY__RUNSC_ROOT: Docker's state root of its runsc "
        "containers (runsc --root)",
    )
    restore_runtime: str = Field(
        "runsc-restore",
        description="SANDGRID_WORKER__MEMORY__RESTORE_RUNTIME: the daemon's runtime whose "
        "create restores an image (deploy/local/runsc-restore)",
    )
    image_dir: Path = Field(
        Path("/var/lib/sandgrid/memory"),
        description="SANDGRID_WORKER__MEMORY__IMAGE_DIR: scratch space for images on this "
        "host, readable by the Docker daemon",
    )
    max_image_mb: int = Field(
        4096,
        ge=1,
        description="SANDGRID_WORKER__MEMORY__MAX_IMAGE_MB: a larger checkpoint is refused "
        "(the pause falls back to the workspace alone)",
    )
    checkpoint_timeout_s: float = Field(
        120.0, gt=0, description="SANDGRID_WORKER__MEMORY__CHECKPOINT_TIMEOUT_S"
    )
    # 24.4 (resume speed): what runsc may skip or defer.
    exclude_zero_pages: bool = Field(
        True,
        description="SANDGRID_WORKER__MEMORY__EXCLUDE_ZERO_PAGES: runsc checkpoint "
        "--exclude-committed-zero-pages (zero pages are not written, nor uploaded)",
    )
    restore_background: bool = Field(
        True,
        description="SANDGRID_WORKER__MEMORY__RESTORE_BACKGROUND: runsc restore --background "
        "(the sandbox runs while its pages load; the image is uncompressed on disk)",
    )
    # 24.4 (resume speed, memcache): the node's cache of unpacked chunks.
    cache_mb: int = Field(
        2048,
        ge=0,
        description="SANDGRID_WORKER__MEMORY__CACHE_MB: the most a node keeps on its disk of "
        "unpacked, verified memory chunks, so forks restored on it fetch each chunk once "
        "(least recently used evicted first; 0: no cache)",
    )


class WorkerSettings(BaseModel):
    node: str = Field("", description="SANDGRID_WORKER__NODE; default: the host name")
    types: list[str] = Field(
        default_factory=lambda: ["python"], description="SANDGRID_WORKER__TYPES"
    )
    pool_size: int = Field(
        2, ge=0, description="SANDGRID_WORKER__POOL_SIZE warm containers per type"
    )
    pool_max: int = Field(
        DEFAULT_POOL_MAX,
        ge=0,
        le=64,
        description="SANDGRID_WORKER__POOL_MAX: the most warm containers of one type the "
        "pool keeps when demand raises its target above the type's pool size (its floor; "
        "a floor above it is its own ceiling; 0: the pool size, fixed)",
    )
    idle_ttl_s: float = Field(
        DEFAULT_IDLE_TTL_S,
        gt=0,
        description="SANDGRID_WORKER__IDLE_TTL_S: a session idle this long is snapshotted "
        "(unless its policy is never) and its sandbox released; its next turn restores it",
    )
    reap_interval_s: float = Field(
        DEFAULT_REAP_INTERVAL_S,
        gt=0,
        description="SANDGRID_WORKER__REAP_INTERVAL_S: how often the reaper looks for idle "
        "sessions, orphan containers and snapshot collection due",
    )
    snapshot_store: str = Field("minio", description="SANDGRID_WORKER__SNAPSHOT_STORE: minio|local")
    local_snapshot_dir: Path = Field(
        Path("/var/lib/sandgrid/snapshots"), description="SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR"
    )
    agent_path: Path | None = Field(
        None, description="SANDGRID_WORKER__AGENT_PATH: the agent file as the engine's host sees it"
    )
    snapshots: SnapshotSettings = Field(default_factory=SnapshotSettings)
    metrics_port: int = Field(
        DEFAULT_WORKER_METRICS_PORT,
        ge=0,
        le=65535,
        description="SANDGRID_WORKER__METRICS_PORT: the node's Prometheus /metrics; 0 = any "
        "free port (the heartbeat carries the port the node got)",
    )
    metrics_addr: str = Field(
        DEFAULT_WORKER_METRICS_ADDR,
        description="SANDGRID_WORKER__METRICS_ADDR: the address /metrics listens on, loopback "
        "by default (23.3); the API names it in the node's URL (a wildcard by the host name)",
    )
    egress: EgressSettings = Field(default_factory=EgressSettings)
    # Memory snapshots (issue 24).
    memory: MemorySettings = Field(default_factory=MemorySettings)


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


# issue 23.7: concurrent streams and terminals (scheduler.api.stream_slots)
DEFAULT_STREAMS_PER_TENANT = 64
DEFAULT_STREAMS_PER_SESSION = 16
DEFAULT_TERMINALS_PER_TENANT = 16
DEFAULT_TERMINALS_PER_SESSION = 2
DEFAULT_STREAM_LEASE_S = 30.0


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


# ---- issue 21.1: exposed ports and signed preview URLs (docs/ports.md) ----
DEFAULT_PORT_URL_TTL_S = 3600
DEFAULT_PORT_URL_MAX_TTL_S = 7 * 86400
DEFAULT_PORT_MAX_CONNECTIONS = 32
DEFAULT_PORT_MAX_BYTES = 1 << 30


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


# ---- 25.3: images through the grid's registry (worker.images; docs/operations.md) ----
class ImageSettings(BaseModel):
    """Where nodes pull the images of sandbox types they lack."""

    registry: str = Field(
        "127.0.0.1:5000",
        pattern=r"^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?$",
        description="SANDGRID_IMAGES__REGISTRY: the grid's registry (host:port) nodes pull "
        "a type's image from when they lack it; empty: local images only",
    )


DEFAULT_WARM_BUILDS = 2
DEFAULT_WARM_BASES = ("python",)


# ---- 25.2: templates built on the grid (worker.templates; docs/templates.md) ----
class TemplateSettings(BaseModel):
    """Where a node's builds find gVisor's state (for ``runsc tar rootfs-upper``), and the
    build sandboxes it keeps warm (``worker.templates.warm``)."""

    runsc_root: Path = Field(
        Path("/run/docker/runtime-runc/moby"),
        description="SANDGRID_TEMPLATES__RUNSC_ROOT: runsc's --root under the node's Docker "
        "engine (containerd's runc shim keeps every OCI runtime's state there)",
    )
    warm: int = Field(
        DEFAULT_WARM_BUILDS,
        ge=0,
        le=16,
        description="SANDGRID_TEMPLATES__WARM: build sandboxes a node that runs gVisor keeps "
        "warm, one per kind (base image, CPU and memory quotas, network); 0: none",
    )
    warm_bases: list[str] = Field(
        default_factory=lambda: list(DEFAULT_WARM_BASES),
        description="SANDGRID_TEMPLATES__WARM_BASES (JSON list): the types whose image gets a "
        "warm build sandbox at the node's start (the default quotas, with network)",
    )


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
