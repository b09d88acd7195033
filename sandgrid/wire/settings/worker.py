"""The sections a worker node reads: ``SANDGRID_WORKER__*`` (its pool, snapshots, egress
proxy, memory snapshots), and where its images and template builds come from."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from sandgrid.wire.settings.defaults import (
    DEFAULT_IDLE_TTL_S,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_TOTAL,
    DEFAULT_REAP_INTERVAL_S,
    DEFAULT_SNAPSHOT_CARRY_BYTES,
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_GC_INTERVAL_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_MAX_BYTES,
    DEFAULT_SNAPSHOT_MAX_FILES,
    DEFAULT_SNAPSHOT_THREADS,
    DEFAULT_WARM_BASES,
    DEFAULT_WARM_BUILDS,
    DEFAULT_WORKER_METRICS_ADDR,
    DEFAULT_WORKER_METRICS_PORT,
    MAX_SNAPSHOT_CARRY_BYTES,
)

__all__ = [
    "EgressSettings",
    "ImageSettings",
    "MemorySettings",
    "SnapshotSettings",
    "TemplateSettings",
    "WorkerSettings",
]


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
    carry_bytes: int = Field(
        DEFAULT_SNAPSHOT_CARRY_BYTES,
        ge=0,
        le=MAX_SNAPSHOT_CARRY_BYTES,
        description="SANDGRID_WORKER__SNAPSHOTS__CARRY_BYTES: a snapshot whose new blobs and "
        "manifest are at most this many bytes travels inside its pointer's one write, after the "
        "small ones before it (pointer v4: a chain, folded out after the answer once past half "
        "of this); 0: never, as during a rollout while nodes older than pointer v4 still run",
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
    restores_at_once: int = Field(
        1,
        ge=1,
        description="SANDGRID_WORKER__MEMORY__RESTORES_AT_ONCE: how many `runsc restore`s a "
        "node runs at the same time; the others' images are fetched meanwhile and wait "
        "(forks landing on one node: each restore is CPU-bound, so one at a time brings "
        "the first answering sooner and the last no later)",
    )
    # 24.4 (resume speed, memcache): the node's cache of unpacked chunks.
    cache_mb: int = Field(
        2048,
        ge=0,
        description="SANDGRID_WORKER__MEMORY__CACHE_MB: the most a node keeps on its disk of "
        "unpacked, verified memory chunks, so forks restored on it fetch each chunk once "
        "(least recently used evicted first; 0: no cache)",
    )
    # 24.1 (resume speed, memstage): images staged ahead for their resume on this node.
    stage_mb: int = Field(
        2048,
        ge=0,
        description="SANDGRID_WORKER__MEMORY__STAGE_MB: the most a node keeps on its disk of "
        "paused sessions' images staged ahead (fetched, verified, unpacked) for a resume "
        "routed to it (oldest dropped first; 0: the node stages nothing)",
    )
    stage_max_age_s: float = Field(
        3600.0,
        gt=0,
        description="SANDGRID_WORKER__MEMORY__STAGE_MAX_AGE_S: a staged image not resumed "
        "within this long is dropped (the resume then fetches it, as any node would)",
    )


class WorkerSettings(BaseModel):
    node: str = Field("", description="SANDGRID_WORKER__NODE; default: the host name")
    task_log: bool = Field(
        False,
        description="SANDGRID_WORKER__TASK_LOG (`sandgrid worker --task-log`): write Celery's "
        "two lines per turn (received, succeeded) at INFO; off, they are DEBUG lines",
    )
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
    pool_total: int = Field(
        DEFAULT_POOL_TOTAL,
        ge=0,
        le=512,
        description="SANDGRID_WORKER__POOL_TOTAL: the most warm containers the node keeps "
        "across all its types, made or being made (each holds its memory quota while it "
        "waits); the types' pool sizes are filled first, then what demand asks (0: no cap)",
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


# ---- 25.3: images through the grid's registry (worker.images; docs/operations.md) ----
class ImageSettings(BaseModel):
    """Where nodes pull the images of sandbox types they lack."""

    registry: str = Field(
        "127.0.0.1:5000",
        pattern=r"^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?$",
        description="SANDGRID_IMAGES__REGISTRY: the grid's registry (host:port) nodes pull "
        "a type's image from when they lack it; empty: local images only",
    )


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
