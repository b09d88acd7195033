"""A sandbox's limits (``Quotas``): what a session asks for, within its tenant's ceilings."""

from __future__ import annotations

from pydantic import Field

from sandgrid.models.base import DEFAULT_OUTPUT_CAP, WireModel

__all__ = ["Quotas"]


class Quotas(WireModel):
    """Per-sandbox limits. Every field is enforced, the ceilings by the tenant."""

    cpus: float = Field(1.0, gt=0.05, le=16, description="CPU cores (CFS quota)")
    memory_mb: int = Field(512, ge=32, le=65536, description="memory limit; swap is off")
    pids: int = Field(256, ge=8, le=32768, description="max processes and threads")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="default exec deadline")
    workspace_mb: int = Field(256, ge=1, le=65536, description="size of /workspace")
    home_mb: int = Field(128, ge=1, le=65536, description="size of the sandbox user's home")
    tmp_mb: int = Field(64, ge=1, le=65536, description="size of /tmp")
    output_bytes: int = Field(
        DEFAULT_OUTPUT_CAP, ge=1024, le=64 << 20, description="cap on stdout and on stderr"
    )
    nofile: int = Field(1024, ge=64, le=65536, description="open files ulimit")
    fsize_mb: int = Field(256, ge=1, le=65536, description="largest file ulimit")
    network: bool = Field(False, description="network access (only if the type allows it)")
    background_processes: int = Field(
        8, ge=0, le=64, description="background processes running at once in the sandbox"
    )
    max_parallel_turns: int = Field(
        8,
        ge=1,
        le=16,
        description="turns of the session running at once; a call beyond waits in order",
    )
