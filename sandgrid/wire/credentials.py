"""The refusal to run a worker or the API on the shipped, well-known credentials (23.19).

``make services`` generates random MinIO credentials and a Redis password per
role; a process still holding the defaults (MinIO ``sandgrid`` /
``sandgrid-secret``, or a Redis URL without a password) would let any local
process read every tenant's snapshots, the session registry and the token
hashes. The entry points (``sandgrid serve``, ``sandgrid worker``) call
``insecure_defaults`` first and exit with its message, unless
``SANDGRID_ALLOW_INSECURE_DEFAULTS=1`` says this is a test.

The processes that reach the machine's shared services from outside a grid
(the tests' fixtures, ``bench/``) read the generated credentials here too:
``generated_secrets`` of the state directory, ``with_user`` for a Redis URL.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sandgrid.wire.settings import SHIPPED_MINIO_ACCESS_KEY, SHIPPED_MINIO_SECRET_KEY, Settings

__all__ = [
    "ADMIN_USER",
    "DEFAULT_STATE_DIR",
    "generated_secrets",
    "insecure_defaults",
    "refusal",
    "with_user",
]

#: Where ``make services`` keeps them (deploy/local/lib.sh, ``SANDGRID_STATE_DIR``).
DEFAULT_STATE_DIR = Path("/var/lib/sandgrid")
#: The Redis user of operators, the bring-up scripts and the tests (every command).
ADMIN_USER = "sg-admin"
_SHARED_REDIS = ("127.0.0.1", 6379)


def generated_secrets(state_dir: Path) -> dict[str, str]:
    """``make services``'s ``secrets.env`` (``KEY=VALUE`` lines), empty when there is none.

    Empty means a machine not yet switched over: its Redis takes no password and
    its MinIO the shipped keys.
    """
    try:
        text = (state_dir / "secrets.env").read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.startswith("#")}


def with_user(url: str, user: str, password: str, *, port: int = _SHARED_REDIS[1]) -> str:
    """``url`` with ``user:password``, when it names none and is the shared Redis.

    The shared Redis is the one on 127.0.0.1:``port``; a URL of another server
    (a test's or a benchmark's own, password-less) is returned as it is.
    """
    parts = urlsplit(url)
    shared = parts.hostname == _SHARED_REDIS[0] and (parts.port or 6379) == port
    if parts.password is not None or not shared:
        return url
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{parts.netloc}"))


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
