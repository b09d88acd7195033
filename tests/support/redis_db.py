"""A test's own Redis database, flushed: what a module's grid fixture starts from."""

from __future__ import annotations

import os

import pytest
import redis

__all__ = ["fresh_db"]


def fresh_db(url: str) -> redis.Redis[str]:
    """A client of database ``url``, flushed; skips the test when Redis is not there
    (fails it in CI, where Redis must be)."""
    client: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Redis missing in CI: {exc}")
        pytest.skip(f"Redis at {url} unreachable: {exc}")
    return client
