"""A fake state directory of generated credentials, and running the deploy scripts on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["ROLES", "ROOT", "deploy_script", "fake_state"]

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("ADMIN", "API", "WORKER", "FLOWER", "METRICS")


def fake_state(state: Path) -> dict[str, str]:
    """Write a ``secrets.env``, ``flower-password`` and ``metrics-token`` into ``state``."""
    secrets = {"SG_MINIO_ACCESS_KEY": "sg-ab", "SG_MINIO_SECRET_KEY": "minio-secret"}
    secrets |= {f"SG_REDIS_PW_{r}": f"pw-{r.lower()}-x" for r in ROLES}
    (state / "secrets.env").write_text("# c\n" + "".join(f"{k}={v}\n" for k, v in secrets.items()))
    (state / "flower-password").write_text("fpw\n")
    (state / "metrics-token").write_text("sgm_t\n")
    return secrets


def deploy_script(path: str, *args: str) -> str:
    """The standard output of the Python deploy script ``path`` (relative to the root)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / path), *args], capture_output=True, text=True, check=True
    )
    return run.stdout
