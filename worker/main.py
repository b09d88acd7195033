"""``sandgrid worker``: one Celery worker process per node.

The pool is ``threads``: the warm pools and the session table exist once per
node, shared by every task thread (a prefork pool would copy them per child).
The node consumes its own direct queue and the shared queues of its types.

Logging is the grid's (``sandgrid.wire.logs``: one line per record, JSON unless
``SANDGRID_LOG_FORMAT=text``), set up through Celery's ``setup_logging``
signal, so Celery configures none of its own and prints no banner; each
record written inside a task names the task. Celery's own lines never show
a message body (``hide_message_bodies``), a turn's arguments or its value
(``worker.turns.task_repr``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
from typing import Any

from celery import current_task, signals
from celery.worker.consumer import consumer

from sandgrid.wire.celery_app import app, worker_queues
from sandgrid.wire.logs import setup_logging, show_task_lines
from sandgrid.wire.settings import get_settings

__all__ = [
    "MALLOC_ARENAS",
    "RESTART_PAUSE_S",
    "RESULT_STORE_RETRIES",
    "TaskContext",
    "configure_logging",
    "hide_message_bodies",
    "limit_malloc_arenas",
    "restart_self",
    "run_worker",
]

log = logging.getLogger(__name__)

#: Pause before a worker that stopped on its own starts again (s).
RESTART_PAUSE_S = 1.0
#: Tries to store a turn's outcome while Redis is unreachable (backing off to 1 s
#: between tries): an outcome lost to a short outage would leave its caller waiting
#: for the turn's deadline, and the turn ran.
RESULT_STORE_RETRIES = 120


def run_worker(types: list[str], concurrency: int, node: str) -> None:
    """Run the worker node until it is stopped (SIGTERM drains it).

    Args:
        types: sandbox types served (``python``, ``python-gvisor``...).
        concurrency: turns run at once (threads).
        node: the node's name, unique in the grid.
    """
    os.environ["SANDGRID_WORKER__NODE"] = node
    limit_malloc_arenas()
    configure_logging()  # now: Celery warns (root user...) before it sets logging up
    signals.setup_logging.connect(configure_logging, weak=False)
    hide_message_bodies()
    app.conf.update(
        result_backend_always_retry=True,
        result_backend_max_retries=RESULT_STORE_RETRIES,
        result_backend_max_sleep_between_retries_ms=1000,
    )
    import worker.tasks  # noqa: F401  (registers the task)
    from worker.node import start_node, stop_node
    from worker.templates import close_builds, warm_builds

    asked_to_stop = threading.Event()

    @signals.worker_shutting_down.connect(weak=False)
    def _drain(**_: Any) -> None:
        asked_to_stop.set()
        log.info("node %s: draining", node)

    @signals.worker_shutdown.connect(weak=False)
    def _stop(**_: Any) -> None:
        close_builds()
        stop_node()

    started = start_node(node, types)  # before consuming: a task may arrive at once
    warm_builds(started)  # 25: build sandboxes ready before the first build, off its path

    @signals.worker_ready.connect(weak=False)
    def _ready(sender: Any = None, **_: Any) -> None:
        started.queues.attach(sender)  # types added or removed from now on (25.1)

    queues = ",".join(worker_queues(list(started.types), node))
    try:
        _consume(queues, node, concurrency)
    finally:
        if not asked_to_stop.is_set():
            restart_self(node)


def restart_self(node: str) -> None:
    """Start this worker again, as a new process (a new incarnation of ``node``).

    Celery's consumer can die of an "unrecoverable error" when the broker
    connection drops at the wrong moment (kombu's Redis transport loses its
    connection object while closing a channel). Nobody asked this node to stop,
    so it must not stay down: the node has drained (``worker_shutdown``), and
    the same command runs again in this process's place, after a pause that
    keeps a lasting outage from spinning.
    """
    log.error("node %s: the Celery worker stopped on its own; starting it again", node)
    time.sleep(RESTART_PAUSE_S)
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def _consume(queues: str, node: str, concurrency: int) -> None:
    """Run Celery's worker loop on ``queues`` until it stops."""
    app.worker_main(
        [
            "--quiet",  # no banner: every line of the log is a record
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency}",
            f"--hostname={node}@%h",
            f"--queues={queues}",
            "--without-mingle",
            "--without-gossip",
            "--task-events",
            f"--loglevel={get_settings().log_level}",
        ]
    )


class TaskContext(logging.Filter):
    """Names the Celery task (id, name) a record was written in, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        task: Any = current_task
        if task:
            record.sg_task_id = getattr(task.request, "id", None)
            record.sg_task = getattr(task, "name", None)
        return True


def configure_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery's ``setup_logging`` receiver: the grid's logging, not Celery's."""
    settings = get_settings()
    handler = setup_logging(settings.log_format, loglevel or settings.log_level)
    handler.addFilter(TaskContext())
    show_task_lines(settings.worker.task_log)


def _body_size(message: Any, body: Any = None) -> str:
    raw = getattr(message, "body", b"") or b""
    return f"(a body of {len(raw)} bytes, not shown)"


def hide_message_bodies() -> None:
    """Make Celery's consumer name a refused message's size, never its body.

    A message the node cannot take (an unknown task, a bad encoding: another
    version of the grid) is logged with its body, which holds the turn's file
    contents, stdin and environment values; ``dump_body`` is what the consumer's
    error lines call for it.
    """
    consumer.dump_body = _body_size  # type: ignore[assignment]


MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def limit_malloc_arenas() -> bool:
    """Cap glibc's malloc arenas for this process, unless ``MALLOC_ARENA_MAX`` is set.

    A worker's threads each get an arena by default (up to 8 per core), and the
    memory a restore or snapshot frees stays cached in them: a 577 MB restore
    left about 390 MB of RSS behind with the default and 169 MB with two
    arenas. Returns whether the cap was applied (not on other C libraries).
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS))
    except (OSError, AttributeError):
        return False
