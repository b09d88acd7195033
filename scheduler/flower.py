"""Flower with its ``/metrics`` behind the same basic auth as the rest of it.

Flower 2.2 serves ``/metrics`` to anyone, even with ``--basic-auth``: its
handler skips the ``authenticated`` check every page has, and no option turns
it on. This module starts Flower exactly as ``celery ARGS`` would, after
wrapping that one handler with ``tornado.web.authenticated``, which runs
Flower's own ``get_current_user`` (basic auth, or its OAuth when configured)::

    python -m scheduler.flower -A sandgrid.wire.celery_app:app flower --basic-auth=admin:PW

Prometheus scrapes it with the same user and password (deploy/prometheus/).

Its log lines are the grid's (``sandgrid.wire.logs``, ``SANDGRID_LOG_FORMAT``):
set up before Flower starts, so tornado adds no handler of its own.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main", "protect_metrics"]


def protect_metrics() -> None:
    """Make Flower's ``/metrics`` handler require an authenticated user (idempotent)."""
    import tornado.web
    from flower.views import monitor

    get: Any = monitor.Metrics.get
    if not getattr(get, "_sandgrid_auth", False):
        wrapped: Any = tornado.web.authenticated(get)
        wrapped._sandgrid_auth = True
        monitor.Metrics.get = wrapped


def main(argv: list[str] | None = None) -> None:
    """``celery ARGV`` with Flower's ``/metrics`` protected, logging the grid's lines."""
    from celery.bin.celery import main as celery_main

    from sandgrid.wire.logs import setup_logging
    from sandgrid.wire.settings import get_settings

    settings = get_settings()
    setup_logging(settings.log_format, settings.log_level)
    protect_metrics()
    sys.argv = ["celery", *(sys.argv[1:] if argv is None else argv)]
    celery_main()


if __name__ == "__main__":
    main()
