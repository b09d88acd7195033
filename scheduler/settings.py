"""Settings of the grid, read once per process from ``SANDGRID_*`` variables.

Nested fields use ``__``: ``SANDGRID_MINIO__ENDPOINT=127.0.0.1:9000``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["MinioSettings", "Settings", "WorkerSettings", "get_settings"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_MINIO_ENDPOINT = "127.0.0.1:9000"
DEFAULT_API_URL = "http://127.0.0.1:8700"
DEFAULT_LEASE_TTL_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
DEFAULT_VISIBILITY_TIMEOUT_S = 3900
DEFAULT_IDLE_TTL_S = 300.0


class MinioSettings(BaseModel):
    endpoint: str = Field(DEFAULT_MINIO_ENDPOINT, description="SANDGRID_MINIO__ENDPOINT")
    access_key: str = Field("sandgrid", description="SANDGRID_MINIO__ACCESS_KEY")
    secret_key: str = Field("sandgrid-secret", description="SANDGRID_MINIO__SECRET_KEY")
    bucket: str = Field("sandgrid-snapshots", description="SANDGRID_MINIO__BUCKET")
    secure: bool = Field(False, description="SANDGRID_MINIO__SECURE")


class WorkerSettings(BaseModel):
    node: str = Field("", description="SANDGRID_WORKER__NODE; default: the host name")
    types: list[str] = Field(default_factory=lambda: ["python"], description="SANDGRID_WORKER__TYPES")
    pool_size: int = Field(2, ge=0, description="SANDGRID_WORKER__POOL_SIZE warm containers per type")
    runtime: str = Field("runc", description="SANDGRID_WORKER__RUNTIME: runc or runsc")
    idle_ttl_s: float = Field(DEFAULT_IDLE_TTL_S, description="SANDGRID_WORKER__IDLE_TTL_S")
    snapshot_store: str = Field("minio", description="SANDGRID_WORKER__SNAPSHOT_STORE: minio|local")
    local_snapshot_dir: Path = Field(
        Path("/var/lib/sandgrid/snapshots"), description="SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR"
    )


class Settings(BaseSettings):
    """One settings object per process (see ``get_settings``)."""

    model_config = SettingsConfigDict(env_prefix="SANDGRID_", env_nested_delimiter="__")

    redis_url: str = Field(DEFAULT_REDIS_URL, description="SANDGRID_REDIS_URL")
    api_url: str = Field(DEFAULT_API_URL, description="SANDGRID_API_URL (SDK and CLI)")
    token: str = Field("", description="SANDGRID_TOKEN (SDK and CLI)")
    tenants_file: Path | None = Field(None, description="SANDGRID_TENANTS_FILE (JSON)")
    lease_ttl_s: float = Field(DEFAULT_LEASE_TTL_S, description="SANDGRID_LEASE_TTL_S")
    heartbeat_s: float = Field(DEFAULT_HEARTBEAT_S, description="SANDGRID_HEARTBEAT_S")
    visibility_timeout_s: int = Field(
        DEFAULT_VISIBILITY_TIMEOUT_S, description="SANDGRID_VISIBILITY_TIMEOUT_S"
    )
    queue_depth_limit: int = Field(500, description="SANDGRID_QUEUE_DEPTH_LIMIT (429 above)")
    image_prefix: str = Field("sandgrid/sandbox-", description="SANDGRID_IMAGE_PREFIX")
    minio: MinioSettings = Field(default_factory=MinioSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once from the environment."""
    return Settings()
