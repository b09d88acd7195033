"""Print the Kubernetes Secrets of a grid from the credentials ``make services`` made (23.19).

    python deploy/k8s/secrets.py /var/lib/sandgrid | kubectl apply -f -

The manifests (sandgrid.yaml) ship no credential: every password is one of
these Secrets, made from the state directory's ``secrets.env`` (MinIO's root
user, a Redis password per role), ``flower-password`` and ``metrics-token``.
Redis's ACL file holds only hashes (deploy/local/redis_acl.py); each pod gets
only its own role's Redis URL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "local"))

from redis_acl import acl_file, read_env

__all__ = ["main", "secrets"]

REDIS = "redis:6379/0"  # the Service of the Redis StatefulSet


def _secret(name: str, data: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": data,
    }


def secrets(state: Path) -> list[dict[str, object]]:
    """The Secret objects of the grid whose state directory is ``state``."""
    env = read_env(state / "secrets.env")
    urls = {
        f"{role}-url": f"redis://sg-{role}:{env[f'SG_REDIS_PW_{role.upper()}']}@{REDIS}"
        for role in ("api", "worker", "flower")
    }
    flower = (state / "flower-password").read_text().strip()
    return [
        _secret("sandgrid-redis", {"users.acl": acl_file(env), **urls}),
        _secret(
            "sandgrid-minio",
            {
                "SANDGRID_MINIO__ACCESS_KEY": env["SG_MINIO_ACCESS_KEY"],
                "SANDGRID_MINIO__SECRET_KEY": env["SG_MINIO_SECRET_KEY"],
            },
        ),
        _secret("sandgrid-flower", {"basic-auth": f"admin:{flower}"}),
        _secret("sandgrid-metrics", {"token": (state / "metrics-token").read_text().strip()}),
    ]


def main(argv: list[str]) -> None:
    state = Path(argv[1] if len(argv) > 1 else "/var/lib/sandgrid")
    sys.stdout.write("\n---\n".join(json.dumps(doc, indent=2) for doc in secrets(state)) + "\n")


if __name__ == "__main__":
    main(sys.argv)
