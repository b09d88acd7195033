"""The machine's shared Redis and MinIO as the benchmarks reach them (23.19).

Once ``make services`` has generated credentials (``secrets.env`` in
``SANDGRID_STATE_DIR``, default ``/var/lib/sandgrid``), the shared Redis takes
no connection without a password and MinIO no longer the shipped keys: a
benchmark's URL of the shared Redis gets the admin user (benchmarks flush their
database), and the grid processes a benchmark starts get the generated MinIO
keys, the way ``tests/conftest.py`` does it. On a machine not yet switched over
everything stays password-less, and only then are the grid processes told to
accept that (``SANDGRID_ALLOW_INSECURE_DEFAULTS=1``).
"""

from __future__ import annotations

import os
from pathlib import Path

from sandgrid.wire.credentials import (
    ADMIN_USER,
    DEFAULT_STATE_DIR,
    generated_secrets,
    insecure_defaults,
    with_user,
)
from sandgrid.wire.settings import MinioSettings, Settings

__all__ = ["grid_env", "minio_settings", "shared_redis_url"]

_MINIO_KEYS = {
    "SANDGRID_MINIO__ACCESS_KEY": "SG_MINIO_ACCESS_KEY",
    "SANDGRID_MINIO__SECRET_KEY": "SG_MINIO_SECRET_KEY",
}


def _secrets() -> dict[str, str]:
    return generated_secrets(Path(os.environ.get("SANDGRID_STATE_DIR", DEFAULT_STATE_DIR)))


def shared_redis_url(url: str) -> str:
    """``url`` as the admin user when it is the shared Redis and credentials exist."""
    password = _secrets().get("SG_REDIS_PW_ADMIN")
    if not password:
        return url
    port = int(os.environ.get("SANDGRID_REDIS_PORT", "6379"))
    return with_user(url, ADMIN_USER, password, port=port)


def _minio_env() -> dict[str, str]:
    """The generated MinIO keys, for those the environment does not already set."""
    found = _secrets()
    return {
        var: found[key]
        for var, key in _MINIO_KEYS.items()
        if var not in os.environ and found.get(key)
    }


def minio_settings() -> MinioSettings:
    """``SANDGRID_MINIO__*``, with the generated keys where the environment has none."""
    env = _minio_env()
    base = Settings().minio
    return base.model_copy(
        update={
            "access_key": env.get("SANDGRID_MINIO__ACCESS_KEY", base.access_key),
            "secret_key": env.get("SANDGRID_MINIO__SECRET_KEY", base.secret_key),
        }
    )


def grid_env(url: str) -> dict[str, str]:
    """Settings for the grid processes a benchmark starts on the Redis ``url``.

    The generated MinIO keys; and ``SANDGRID_ALLOW_INSECURE_DEFAULTS=1`` only
    when ``url`` or MinIO is still password-less (a machine not switched over, or
    a benchmark's own Redis), since the API and the workers refuse that otherwise.
    """
    env = _minio_env()
    settings = Settings(redis_url=url, minio=minio_settings())
    if insecure_defaults(settings):
        env["SANDGRID_ALLOW_INSECURE_DEFAULTS"] = "1"
    return env
