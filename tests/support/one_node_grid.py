"""A grid of one API and one worker node (python, runc) for an integration module.

Its own port and Redis database (flushed before and after), local snapshots,
one warm sandbox: what a module that talks HTTP to a real grid needs. Redis
missing is a skip on a developer's machine and a failure in CI. In a module::

    grid = one_node_fixture("ascope", port=PORT, redis_url=REDIS_URL, token=TOKEN)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.localgrid import LocalGrid

__all__ = ["flushed_redis", "one_node_fixture"]


def _missing(reason: str) -> None:
    """A service the module needs is down: a failure in CI, a skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"missing in CI: {reason}")
    pytest.skip(reason)


@contextmanager
def flushed_redis(url: str) -> Iterator[redis.Redis[str]]:
    """The test Redis database, flushed before and after (``_missing`` when it is down)."""
    r: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        _missing(f"Redis at {url} unreachable: {exc}")
    try:
        yield r
    finally:
        r.flushdb()
        r.close()


def one_node_fixture(
    name: str,
    *,
    port: int,
    redis_url: str,
    token: str,
    settings: dict[str, str] | None = None,
    limits: dict[str, Any] | None = None,
    types: str = "python",
) -> Callable[..., Any]:
    """A module fixture ``grid``: tenant ``name`` with ``token``, worker ``name-w1`` (4 threads).

    ``settings``: more ``SANDGRID_*`` variables; ``limits``: the tenant's (``TenantLimits``);
    ``types``: the sandbox types the worker serves (comma-separated).
    """

    @pytest.fixture(scope="module")
    def grid(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
        env = {
            "SANDGRID_WORKER__POOL_SIZE": "1",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__METRICS_PORT": "0",
            **(settings or {}),
        }
        with flushed_redis(redis_url):
            g = LocalGrid(
                tmp_path_factory.mktemp(name),
                port=port,
                redis_url=redis_url,
                tenants={name: token},
                env=env,
            )
            if limits:
                row = {"name": name, "token": token, "limits": limits}
                Path(g.env["SANDGRID_TENANTS_FILE"]).write_text(json.dumps({"tenants": [row]}))
            try:
                g.start([f"{name}-w1"], types=types, concurrency=4)
                yield g
            finally:
                g.stop()

    return grid
