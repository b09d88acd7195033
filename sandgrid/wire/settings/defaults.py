"""The defaults of the grid's settings, as named constants (a field's default is one of them).

Code that needs a default without a settings object (a client's fallback, a test's
expectation, a ceiling of the snapshot format) imports it from here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

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
    "DEFAULT_POOL_TOTAL",
    "DEFAULT_PORT_MAX_BYTES",
    "DEFAULT_PORT_MAX_CONNECTIONS",
    "DEFAULT_PORT_URL_MAX_TTL_S",
    "DEFAULT_PORT_URL_TTL_S",
    "DEFAULT_REAP_INTERVAL_S",
    "DEFAULT_REDIS_URL",
    "DEFAULT_RESULT_EXPIRES_S",
    "DEFAULT_SNAPSHOT_CARRY_BYTES",
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
    "MAX_SNAPSHOT_CARRY_BYTES",
    "SHIPPED_MINIO_ACCESS_KEY",
    "SHIPPED_MINIO_SECRET_KEY",
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
#: The most warm sandboxes a node keeps (made or being made) across all its types.
DEFAULT_POOL_TOTAL = 16
DEFAULT_SNAPSHOT_GC_INTERVAL_S = 600.0
DEFAULT_SNAPSHOT_KEEP = 5
DEFAULT_SNAPSHOT_GC_GRACE_S = 3600.0
DEFAULT_SNAPSHOT_MAX_FILES = 100_000
DEFAULT_SNAPSHOT_MAX_BYTES = 4 << 30
DEFAULT_SNAPSHOT_THREADS = 16
#: A snapshot this small travels inside its pointer (22.2); the most an operator may set.
DEFAULT_SNAPSHOT_CARRY_BYTES = 64 << 10
MAX_SNAPSHOT_CARRY_BYTES = 1 << 20
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
    checkout = Path(__file__).resolve().parents[3] / "deploy" / "types.toml"
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

# issue 23.7: concurrent streams and terminals (scheduler.api.stream_slots)
DEFAULT_STREAMS_PER_TENANT = 64
DEFAULT_STREAMS_PER_SESSION = 16
DEFAULT_TERMINALS_PER_TENANT = 16
DEFAULT_TERMINALS_PER_SESSION = 2
DEFAULT_STREAM_LEASE_S = 30.0

# ---- issue 21.1: exposed ports and signed preview URLs (docs/ports.md) ----
DEFAULT_PORT_URL_TTL_S = 3600
DEFAULT_PORT_URL_MAX_TTL_S = 7 * 86400
DEFAULT_PORT_MAX_CONNECTIONS = 32
DEFAULT_PORT_MAX_BYTES = 1 << 30

# ---- 25: the build sandboxes a node keeps warm (worker.templates.warm) ----
DEFAULT_WARM_BUILDS = 2
DEFAULT_WARM_BASES = ("python",)
