"""The HTTP API: ``create_app()`` builds it; OpenAPI at ``/docs``."""

from __future__ import annotations

from scheduler.api.app import create_app

__all__ = ["create_app"]
