"""Fixtures shared by every test: the real Redis on loopback, database 15.

Redis missing is a skip on a developer's machine and a failure in CI
(``CI=true``), so a broken CI host cannot pass silently. Database 15 is flushed
before and after each test that uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from sandgrid.wire.settings import Settings

TEST_REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


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
# Every container the grid makes carries ``sandgrid.managed=1``. The test session
# fails if one that it made is still there at its end (those that existed before
# it, such as the warm pools of a ``make up`` grid, are not its own).

_MANAGED_AT_START: set[str] | None = None
LEAK_GRACE_S = 15.0


def _managed_containers() -> set[str] | None:
    try:
        import docker

        client = docker.from_env()
        rows = client.api.containers(all=True, filters={"label": ["sandgrid.managed=1"]})
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
