"""The refusal to run a worker or the API on the shipped, well-known credentials (23.19).

``make services`` generates random MinIO credentials and a Redis password per
role; a process still holding the defaults (MinIO ``sandgrid`` /
``sandgrid-secret``, or a Redis URL without a password) would let any local
process read every tenant's snapshots, the session registry and the token
hashes. The entry points (``sandgrid serve``, ``sandgrid worker``) call
``insecure_defaults`` first and exit with its message, unless
``SANDGRID_ALLOW_INSECURE_DEFAULTS=1`` says this is a test.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sandgrid.wire.settings import SHIPPED_MINIO_ACCESS_KEY, SHIPPED_MINIO_SECRET_KEY, Settings

__all__ = ["insecure_defaults", "refusal"]


def insecure_defaults(settings: Settings) -> list[str]:
    """What of ``settings`` is a shipped default or no credential at all, one line each."""
    found = []
    if urlsplit(settings.redis_url).password is None:
        found.append("SANDGRID_REDIS_URL has no password (redis://USER:PASSWORD@HOST:PORT/DB)")
    minio = settings.minio
    if minio.access_key == SHIPPED_MINIO_ACCESS_KEY or minio.secret_key == SHIPPED_MINIO_SECRET_KEY:
        found.append(
            "SANDGRID_MINIO__ACCESS_KEY / SANDGRID_MINIO__SECRET_KEY are the shipped defaults"
        )
    return found


def refusal(settings: Settings, what: str) -> str | None:
    """The message ``what`` (``the API``, ``a worker``) exits with, or None to start.

    None when the credentials are not the defaults, or when the operator allowed
    them (``SANDGRID_ALLOW_INSECURE_DEFAULTS=1``).
    """
    found = insecure_defaults(settings)
    if not found or settings.allow_insecure_defaults:
        return None
    lines = "; ".join(found)
    return (
        f"refusing to start {what} with well-known credentials: {lines}. "
        "Run `make services` (it generates them into the state directory, secrets.env) and "
        "start through deploy/local/grid.sh, or set SANDGRID_ALLOW_INSECURE_DEFAULTS=1 for tests"
    )
