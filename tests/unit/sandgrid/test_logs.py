"""The grid's log lines (sandgrid.wire.logs): one line a record, never a secret.

Each record here carries a secret as a real library would log it (uvicorn's
access and WebSocket lines with a query string, a URL with a password, a
token in a message or a traceback, Celery's task context as ``extra``); the
line written must hold none of them, and be exactly one line (a JSON object
for ``json``).
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from sandgrid.wire.logs import (
    FRAMEWORK_LOGGERS,
    TASK_LINE_LOGGERS,
    JsonFormatter,
    OneLineTextFormatter,
    formatter_for,
    scrub,
    setup_logging,
    show_task_lines,
)

SECRET = "sg_" + "S3cr3tT0k3n" * 4
#: A preview URL's token as sandgrid.wire.preview makes it: ``<payload>.<signature>``.
PREVIEW = "eyJ2IjoyLCJ0IjoiUzNjcjN0In0.S3cr3tS1gnatur3_-S3cr3tS1gnatur3"
FORMATS = ("json", "text")


def _record(name: str, msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args or None, None)
    record.__dict__.update(extra)
    return record


SECRET_RECORDS = {
    "uvicorn access with a query": _record(
        "uvicorn.access",
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:4242",
        "GET",
        f"/v1/sessions/s-1/terminal?token={SECRET}&x=1",
        "1.1",
        101,
    ),
    "uvicorn websocket accepted": _record(
        "uvicorn.error",
        '%s - "WebSocket %s" [accepted]',
        "127.0.0.1:4242",
        f"/v1/sessions/s-1/terminal?ticket={SECRET}",
    ),
    "uvicorn access of a preview URL": _record(
        "uvicorn.access",
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:4242",
        "GET",
        f"/p/{PREVIEW}/index.html",
        "1.1",
        200,
    ),
    "an error on a preview URL's path": _record(
        "scheduler.api.errors", "registry unavailable on %s: %s", f"GET /p/{PREVIEW}/", "down"
    ),
    "a URL with a password": _record("x", "broker at %s", f"redis://:{SECRET}@127.0.0.1:6379/0"),
    "a bearer header": _record("x", "headers: %r", {"authorization": f"Bearer {SECRET}"}),
    "a bare token": _record("x", "tenant token %s rotated", SECRET),
    "a password pair": _record("x", "flower --basic-auth=admin password=%s", SECRET),
    "celery's task context as extra": _record(
        "celery.app.trace",
        "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s",
        {"name": "sandgrid.turn", "id": "t-1.1", "runtime": 0.1, "return_value": "<outcome>"},
        data={"args": SECRET, "kwargs": SECRET},
    ),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", list(SECRET_RECORDS))
def test_a_record_carrying_a_secret_never_prints_it(fmt: str, case: str) -> None:
    line = formatter_for(fmt).format(SECRET_RECORDS[case])
    assert SECRET not in line and "S3cr3t" not in line
    assert "\n" not in line


def test_the_access_line_keeps_the_path_and_status_only() -> None:
    line = json.loads(JsonFormatter().format(SECRET_RECORDS["uvicorn access with a query"]))
    assert line["msg"] == '127.0.0.1:4242 - "GET /v1/sessions/s-1/terminal HTTP/1.1" 101'
    assert line["logger"] == "uvicorn.access" and line["level"] == "INFO"


def _raise_with_secret() -> logging.LogRecord:
    try:
        raise RuntimeError(f"GET http://127.0.0.1/x?token={SECRET}\nfailed\nover lines")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom\nline2", None, None)
        record.exc_info = sys.exc_info()
        return record


def test_a_preview_path_keeps_its_route_and_loses_its_token() -> None:
    line = json.loads(JsonFormatter().format(SECRET_RECORDS["uvicorn access of a preview URL"]))
    assert line["msg"] == '127.0.0.1:4242 - "GET /p/[redacted]/index.html HTTP/1.1" 200'


def test_json_is_one_object_a_line_with_the_traceback_inside() -> None:
    line = JsonFormatter().format(_raise_with_secret())
    assert "\n" not in line
    body = json.loads(line)
    assert set(body) >= {"ts", "level", "logger", "msg", "exc"}
    assert body["msg"] == "boom\nline2" and "RuntimeError" in body["exc"]
    assert SECRET not in line and body["ts"].endswith("Z")


def test_text_is_one_line_with_newlines_escaped() -> None:
    line = OneLineTextFormatter().format(_raise_with_secret())
    assert "\n" not in line and "boom\\nline2" in line and "RuntimeError" in line
    assert SECRET not in line and " ERROR x: " in line


def test_task_context_is_named_and_other_extras_are_not_written() -> None:
    record = _record("worker.x", "hello", sg_task_id="t-1.1", sg_task="sandgrid.turn", other=SECRET)
    body = json.loads(JsonFormatter().format(record))
    assert body["task_id"] == "t-1.1" and body["task"] == "sandgrid.turn"
    assert SECRET not in json.dumps(body)


def test_scrub_leaves_plain_text_alone() -> None:
    text = 'node w1: serving python; "GET /v1/health HTTP/1.1" 200; is it? yes'
    assert scrub(text) == text


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="'xml'"):
        formatter_for("xml")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    named = {
        n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate)
        for n in FRAMEWORK_LOGGERS
    }
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for n, (handlers, propagate) in named.items():
        logging.getLogger(n).handlers[:] = handlers
        logging.getLogger(n).propagate = propagate
    logging.captureWarnings(False)


@pytest.mark.usefixtures("restore_logging")
def test_setup_sends_every_library_through_one_handler() -> None:
    logging.getLogger("uvicorn.access").addHandler(logging.StreamHandler(io.StringIO()))
    logging.getLogger("uvicorn.access").propagate = False
    out = io.StringIO()
    setup_logging("json", "INFO", stream=out)
    setup_logging("json", "INFO", stream=out)  # idempotent: one handler, not two
    assert len(logging.getLogger().handlers) == 1
    logging.getLogger("uvicorn.access").info('%s - "GET %s HTTP/1.1" 200', "c", f"/a?t={SECRET}")
    logging.getLogger("celery.worker").warning("two\nlines")
    lines = out.getvalue().splitlines()
    assert [json.loads(x)["logger"] for x in lines] == ["uvicorn.access", "celery.worker"]
    assert SECRET not in out.getvalue()


@pytest.fixture
def task_lines() -> Iterator[io.StringIO]:
    """The root logger on a buffer at INFO; the task-line filters and levels put back."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    setup_logging("text", "INFO", stream=stream)
    try:
        yield stream
    finally:
        show_task_lines(True)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_celery_per_task_lines_are_not_written_at_info_unless_asked(
    task_lines: io.StringIO,
) -> None:
    show_task_lines(False)
    trace = logging.getLogger("celery.app.trace")
    trace.info("Task %s[%s] succeeded in 0.01s: <outcome>", "sandgrid.turn", "t-1.1")
    logging.getLogger("celery.worker.strategy").info("Task sandgrid.turn[t-1.1] received")
    trace.error("Task sandgrid.turn[t-2.1] raised unexpected: boom")
    logging.getLogger("worker.node").info("node w1 serving python")
    lines = task_lines.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "raised unexpected" in lines[0] and "serving python" in lines[1]


def test_celery_per_task_lines_are_written_when_asked_or_at_debug(
    task_lines: io.StringIO,
) -> None:
    trace = logging.getLogger("celery.app.trace")
    show_task_lines(True)
    show_task_lines(True)  # idempotent
    trace.info("Task sandgrid.turn[t-1.1] succeeded in 0.01s: <outcome>")
    logging.getLogger().setLevel(logging.DEBUG)
    show_task_lines(False)
    trace.info("Task sandgrid.turn[t-2.1] succeeded in 0.01s: <outcome>")
    lines = task_lines.getvalue().splitlines()
    assert [("t-1.1" in x, "t-2.1" in x) for x in lines] == [(True, False), (False, True)]


def test_celery_asks_for_no_per_task_line_when_they_are_off(task_lines: io.StringIO) -> None:
    """Celery builds a line only when its logger says INFO is on (it asks once, at
    the worker's start): off, the question answers no, and a failure still passes."""
    show_task_lines(False)
    for name in TASK_LINE_LOGGERS:
        logger = logging.getLogger(name)
        assert not logger.isEnabledFor(logging.INFO)
        assert logger.isEnabledFor(logging.ERROR)
    show_task_lines(True)
    assert all(logging.getLogger(n).isEnabledFor(logging.INFO) for n in TASK_LINE_LOGGERS)
