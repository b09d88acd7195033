"""The keys of exposed ports (issue 21.1), derived once from the grid's secrets.

Two purposes, two keys, so that one never verifies what the other signed:
``preview`` signs the preview URLs (the API makes and checks them), ``link``
signs the API's connections to a worker's port listener (the API signs, the
worker checks). Both come from ``SANDGRID_PORTS__SECRET``, or, when it is
empty, from the MinIO secret key that the API and every worker already hold
(``deploy/local/credentials.sh`` makes it random per grid): rotating that
secret invalidates every preview URL, which is what a rotation should do.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from sandgrid.wire.settings import Settings

__all__ = ["Purpose", "port_key"]

Purpose = Literal["preview", "link"]


def port_key(settings: Settings, purpose: Purpose) -> bytes:
    """The key of ``purpose`` (HMAC-SHA256 of the label under the grid's secret)."""
    secret = settings.ports.secret or settings.minio.secret_key
    label = f"sandgrid-ports:{purpose}:v1".encode()
    return hmac.new(secret.encode(), label, hashlib.sha256).digest()
