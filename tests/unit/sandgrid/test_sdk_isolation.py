"""The SDK imports with its client dependencies only: no docker, minio, celery, redis."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
for blocked in ("docker", "minio"):
    sys.modules[blocked] = None  # any import of them now fails
import sandgrid.client
from sandgrid.client import AsyncClient, Client
Client("http://127.0.0.1:1", "t").close()
heavy = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("docker", "minio", "celery", "kombu", "redis", "fastapi", "worker")
    and sys.modules[m] is not None
)
assert not heavy, heavy
print("ok")
"""


def test_sdk_imports_without_docker_or_minio() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
