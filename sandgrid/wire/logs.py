"""The grid's log lines: one line per event, JSON by default, never a secret.

Every process of the grid (the API under uvicorn, the Celery workers, Flower)
calls ``setup_logging`` once, before its framework logs anything, so that all
their records (ours, uvicorn's, Celery's, tornado's) go through one handler on
stderr and one of two formatters (``SANDGRID_LOG_FORMAT``):

* ``json`` (the default): one JSON object per line, ``ts``, ``level``,
  ``logger``, ``msg`` and, when there is one, ``exc`` (the traceback, in one
  string) and the Celery task it ran in; what a log shipper parses.
* ``text``: ``TS LEVEL LOGGER: MESSAGE``, one line too: a newline in a message
  or a traceback is written ``\\n``.

Neither ever writes a query string (a URL or a path keeps what is before its
``?``: a token or any value in a query never reaches a log), a preview URL's
token (``/p/<token>/...``: the path itself is the credential), a ``sg_`` token,
a ``Bearer`` credential, the password of a URL, or a ``token=``/``password=``
pair: ``scrub`` runs over every message and traceback. This is the net under
the rule that the code logs ids, ops, sizes and durations, never output, file
contents, stdin or environment values (``docs/operations.md``, Logs).

Extra attributes of a record (Celery passes the whole task context as
``extra={'data': ...}``) are never written: only the fields named above.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import IO, Any, Literal

__all__ = [
    "FRAMEWORK_LOGGERS",
    "TASK_LINE_LOGGERS",
    "JsonFormatter",
    "LogFormat",
    "OneLineTextFormatter",
    "formatter_for",
    "scrub",
    "setup_logging",
    "show_task_lines",
]

LogFormat = Literal["json", "text"]

#: Loggers whose libraries attach handlers of their own: theirs are removed and
#: their records go to the root's one handler.
FRAMEWORK_LOGGERS = (
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "uvicorn.asgi",
    "celery",
    "celery.task",
    "celery.redirected",
    "tornado",
    "tornado.access",
    "tornado.application",
    "tornado.general",
)
#: Celery's loggers of its lines per task at INFO ("received", "succeeded", "retry"):
#: two a turn, written only when asked for (``show_task_lines``).
TASK_LINE_LOGGERS = ("celery.worker.strategy", "celery.app.trace")

_REDACTED = "[redacted]"
_URL_START = r"[A-Za-z][\w+.-]*://"
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # A URL's or a path's query string: from "?" to the next blank or quote.
    (re.compile(rf"(?P<p>(?:{_URL_START}[^\s/?#\"'<>]*)?/[^\s?#\"'<>]*)\?[^\s\"'<>]*"), r"\g<p>"),
    # The password of user:password@ in a URL.
    (re.compile(rf"(?P<p>{_URL_START}[^\s:/@\"'<>]*):[^\s@/\"'<>]+@"), rf"\g<p>:{_REDACTED}@"),
    # A preview URL's token (sandgrid.wire.preview: /p/<payload>.<signature>).
    (re.compile(r"/p/[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), f"/p/{_REDACTED}"),
    # A tenant token (scheduler.tenants: "sg_" + 43 characters).
    (re.compile(r"\bsg_[A-Za-z0-9_-]{8,}"), f"sg_{_REDACTED}"),
    # Authorization header values.
    (re.compile(r"(?i)\b(?P<p>bearer|basic)\s+[^\s\"',]{8,}"), rf"\g<p> {_REDACTED}"),
    # token=..., password: ...
    (
        re.compile(
            r"(?i)\b(?P<p>token|ticket|password|passwd|secret|api[_-]?key)(?P<s>\s*[=:]\s*)"
            r"[^\s&\"',;]+"
        ),
        rf"\g<p>\g<s>{_REDACTED}",
    ),
)


def scrub(text: str) -> str:
    """``text`` without query strings and credentials (see the module doc)."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def _timestamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


def _message(record: logging.LogRecord) -> str:
    try:
        return scrub(record.getMessage())
    except Exception as exc:  # a bad format string must not lose the line
        return f"unformattable log record {record.msg!r:.200}: {type(exc).__name__}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module doc)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": _message(record),
            "pid": record.process,
            "thread": record.threadName,
        }
        for key in ("task_id", "task"):
            value = getattr(record, f"sg_{key}", None)
            if value:
                line[key] = str(value)
        exc = self._exception(record)
        if exc:
            line["exc"] = exc
        return json.dumps(line, ensure_ascii=False, default=str)

    def _exception(self, record: logging.LogRecord) -> str:
        parts = []
        if record.exc_info:
            parts.append(self.formatException(record.exc_info))
        if record.stack_info:
            parts.append(self.formatStack(record.stack_info))
        return scrub("\n".join(parts))


class OneLineTextFormatter(logging.Formatter):
    """``TS LEVEL LOGGER: MESSAGE``, with newlines written ``\\n``: one line a record."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.name}: {_message(record)}"
        task = getattr(record, "sg_task_id", None)
        if task:
            text += f" [task {task}]"
        if record.exc_info:
            text += " | " + scrub(self.formatException(record.exc_info))
        return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def formatter_for(fmt: LogFormat | str) -> logging.Formatter:
    """The formatter of ``SANDGRID_LOG_FORMAT``.

    Raises:
        ValueError: neither ``json`` nor ``text``.
    """
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return OneLineTextFormatter()
    raise ValueError(f"log format {fmt!r}: must be 'json' or 'text'")


def setup_logging(
    fmt: LogFormat | str = "json",
    level: int | str = logging.INFO,
    *,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every record of this process to one handler with the grid's formatter.

    Idempotent: a second call replaces the first one's handler. The handlers
    that uvicorn, Celery and tornado attach to their own loggers are removed,
    so that none of their records is written twice or in another shape.

    Args:
        fmt: ``json`` or ``text``.
        level: the root logger's level (``INFO``...).
        stream: where lines go; stderr when omitted.

    Returns:
        The handler installed on the root logger.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter_for(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in FRAMEWORK_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.propagate = True
    logging.captureWarnings(True)
    return handler


def show_task_lines(show: bool) -> None:
    """Whether Celery's per-task lines are written at INFO; idempotent.

    A turn is two of Celery's INFO lines on its node ("received", "succeeded"):
    at a hundred turns a second that is most of a node's log and ~8% of its CPU
    (docs/performance.md), while the audit log and the metrics already count
    every turn. Unless asked for, or the root logger is at DEBUG when this is
    called (right after ``setup_logging``), their loggers are set to WARNING: a
    failure's line still passes, and Celery, which asks its loggers once at the
    worker's start whether INFO is on, then does not build the lines at all (a
    filter dropped them only once built: ~5% of a node's CPU per turn).
    """
    quiet = not show and not logging.getLogger().isEnabledFor(logging.DEBUG)
    for name in TASK_LINE_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
