"""Fixtures shared by every test: the real Redis on loopback, database 15.

Redis missing is a skip on a developer's machine and a failure in CI
(``CI=true``), so a broken CI host cannot pass silently. Database 15 is flushed
before and after each test that uses it.

Credentials (23.19): when ``make services`` generated them (``secrets.env`` in
the state directory, ``SANDGRID_STATE_DIR``, default ``/var/lib/sandgrid``),
every test URL of the machine's Redis that names no user gets its admin user
(tests flush databases), and the grid processes the tests start inherit the
generated MinIO credentials. ``SANDGRID_ALLOW_INSECURE_DEFAULTS=1`` is set for
the processes the tests start against their own password-less Redis servers
(tests/chaos, the durability tests), and for a machine without generated ones.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sandgrid.wire.credentials import ADMIN_USER, DEFAULT_STATE_DIR, generated_secrets, with_user
from sandgrid.wire.settings import Settings

# A suite started in the background of a shell without job control (`nohup make test &`)
# inherits SIGINT ignored, and so would each CLI a test interrupts with Ctrl-C (its
# `SIGINT`): Python installs no KeyboardInterrupt handler then. A handler here is reset
# to the default in every child at exec, as an ignored signal is not.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

STATE_DIR = Path(os.environ.get("SANDGRID_STATE_DIR", DEFAULT_STATE_DIR))
SHARED_REDIS_PORT = int(os.environ.get("SANDGRID_REDIS_PORT", "6379"))
#: Every test module's Redis URL setting and its default (database) on the shared Redis.
TEST_REDIS_URLS = {
    "SANDGRID_TEST_REDIS_URL": "redis://127.0.0.1:6379/15",
    "SANDGRID_TEST_BATCH_REDIS_URL": "redis://127.0.0.1:6379/14",
    "SANDGRID_TEST_BG_REDIS_URL": "redis://127.0.0.1:6379/13",
    "SANDGRID_TEST_SNAP_REDIS_URL": "redis://127.0.0.1:6379/12",
}


def _use_generated_credentials() -> None:
    os.environ.setdefault("SANDGRID_ALLOW_INSECURE_DEFAULTS", "1")
    found = generated_secrets(STATE_DIR)
    if not found.get("SG_REDIS_PW_ADMIN"):
        return
    for var, default in TEST_REDIS_URLS.items():
        url = os.environ.get(var, default)
        os.environ[var] = with_user(
            url, ADMIN_USER, found["SG_REDIS_PW_ADMIN"], port=SHARED_REDIS_PORT
        )
    os.environ.setdefault("SANDGRID_MINIO__ACCESS_KEY", found.get("SG_MINIO_ACCESS_KEY", ""))
    os.environ.setdefault("SANDGRID_MINIO__SECRET_KEY", found.get("SG_MINIO_SECRET_KEY", ""))


_use_generated_credentials()
# The grids the tests start count their containers against each type's pool size
# (warm pools, nothing left behind), so their pools stay at that size: demand's
# sizing (22.3) is tested on its own, tests/unit/worker/sessions/test_demand.py
# and tests/integration/test_pool.py, which set their ceilings themselves.
os.environ.setdefault("SANDGRID_WORKER__POOL_MAX", "0")
TEST_REDIS_URL = os.environ.get(
    "SANDGRID_TEST_REDIS_URL", TEST_REDIS_URLS["SANDGRID_TEST_REDIS_URL"]
)


def _redis_unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Redis missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def redis_client() -> Iterator[redis.Redis[str]]:
    """A client of the test database, flushed before and after the test."""
    client: redis.Redis[str] = redis.Redis.from_url(TEST_REDIS_URL, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        _redis_unavailable(f"Redis at {TEST_REDIS_URL} unreachable: {exc}")
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def test_settings() -> Settings:
    """Settings pointing at the test database, with short waits."""
    return Settings(
        redis_url=TEST_REDIS_URL,
        lease_ttl_s=5.0,
        turn_margin_s=5.0,
        lost_check_s=0.05,
        auth_cache_s=0.0,
        max_body_bytes=4 << 20,
        slot_wait_s=0.5,
    )


# ---- nothing left behind ------------------------------------------------------
# Every sandbox the grid makes carries ``sandgrid.managed=1``, and every template
# build sandbox ``sandgrid.build`` (not the first: the reaper would take a build's
# sandbox for a stray). The test session fails if one that it made is still there
# at its end (those that existed before it, such as the warm pools of a ``make up``
# grid, are not its own).

_MANAGED_AT_START: set[str] | None = None
LEAK_GRACE_S = 15.0
LEAK_LABELS = ("sandgrid.managed=1", "sandgrid.build")  # a label without a value: any value


def _managed_containers() -> set[str] | None:
    try:
        import docker

        client = docker.from_env()
        rows = [
            row
            for label in LEAK_LABELS
            for row in client.api.containers(all=True, filters={"label": [label]})
        ]
    except Exception:
        return None
    return {row["Id"] for row in rows}


def pytest_sessionstart(session: pytest.Session) -> None:
    global _MANAGED_AT_START
    _MANAGED_AT_START = _managed_containers()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import time

    if _MANAGED_AT_START is None:
        return
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        now = _managed_containers() or set()
        leaked = now - _MANAGED_AT_START
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # removals of the last fixtures may still be under way
    if leaked:
        print(f"\nFAILED: {len(leaked)} sandgrid container(s) left behind: {sorted(leaked)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
