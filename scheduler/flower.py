"""Flower with its ``/metrics`` behind the same basic auth, its password off the command line.

Flower 2.2 serves ``/metrics`` to anyone, even with ``--basic-auth``: its
handler skips the ``authenticated`` check every page has, and no option turns
it on. This module starts Flower exactly as ``celery ARGS`` would, after
wrapping that one handler with ``tornado.web.authenticated``, which runs
Flower's own ``get_current_user`` (basic auth, or its OAuth when configured).

The password is read from the file ``SANDGRID_FLOWER_PASSWORD_FILE`` names
(user ``SANDGRID_FLOWER_USER``, default ``admin``), never from the command
line: ``--basic-auth=admin:PW`` is readable by every local user in ``ps`` and
``/proc/<pid>/cmdline`` (issue 23.6). It reaches Flower as ``FLOWER_BASIC_AUTH``
set inside this process, so not even the process's initial environment
(``/proc/<pid>/environ``) carries it::

    SANDGRID_FLOWER_PASSWORD_FILE=/var/lib/sandgrid/flower-password \\
      python -m scheduler.flower -A sandgrid.wire.celery_app:app flower --port=5555

``FLOWER_BASIC_AUTH=user:pw`` given directly (a Kubernetes Secret) works too.
Prometheus scrapes it with the same user and password (deploy/prometheus/).

Its log lines are the grid's (``sandgrid.wire.logs``, ``SANDGRID_LOG_FORMAT``):
set up before Flower starts, so tornado adds no handler of its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

__all__ = ["PASSWORD_FILE_ENV", "USER_ENV", "basic_auth_from_file", "main", "protect_metrics"]

#: The setting naming the file that holds Flower's password (one line).
PASSWORD_FILE_ENV = "SANDGRID_FLOWER_PASSWORD_FILE"
#: The basic-auth user name (default ``admin``).
USER_ENV = "SANDGRID_FLOWER_USER"


def protect_metrics() -> None:
    """Make Flower's ``/metrics`` handler require an authenticated user (idempotent)."""
    import tornado.web
    from flower.views import monitor

    get: Any = monitor.Metrics.get
    if not getattr(get, "_sandgrid_auth", False):
        wrapped: Any = tornado.web.authenticated(get)
        wrapped._sandgrid_auth = True
        monitor.Metrics.get = wrapped


def basic_auth_from_file(environ: MutableMapping[str, str]) -> bool:
    """Set ``FLOWER_BASIC_AUTH`` from the password file, when one is named.

    Returns:
        Whether it was set from the file.

    Raises:
        SystemExit: the file is named but unreadable or empty (Flower must not
            start open because its password went missing).
    """
    path = environ.get(PASSWORD_FILE_ENV, "")
    if not path:
        return False
    try:
        password = Path(path).read_text().strip()
    except OSError as exc:
        raise SystemExit(f"{PASSWORD_FILE_ENV}={path}: unreadable ({exc.strerror})") from exc
    if not password:
        raise SystemExit(f"{PASSWORD_FILE_ENV}={path}: empty")
    environ["FLOWER_BASIC_AUTH"] = f"{environ.get(USER_ENV) or 'admin'}:{password}"
    return True


def main(argv: list[str] | None = None) -> None:
    """``celery ARGV`` with Flower's ``/metrics`` protected, its password from a file,
    logging the grid's lines."""
    from celery.bin.celery import main as celery_main

    from sandgrid.wire.logs import setup_logging
    from sandgrid.wire.settings import get_settings

    settings = get_settings()
    setup_logging(settings.log_format, settings.log_level)
    basic_auth_from_file(os.environ)
    protect_metrics()
    sys.argv = ["celery", *(sys.argv[1:] if argv is None else argv)]
    celery_main()


if __name__ == "__main__":
    main()
