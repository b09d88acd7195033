"""23.16: ``sandgrid tenants rotate|revoke|set`` take effect at once on running APIs.

Two real API processes (``sandgrid serve``) on one Redis, caching tokens for an
hour (``SANDGRID_AUTH_CACHE_S=3600``), so that only the announced change can make
them refuse a token they have seen: each request below comes right after the
command returns. No worker is needed: auth, limits and the network ceiling are
checked before a session needs one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from sandgrid.localgrid import SANDGRID, LocalGrid

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_TENANTS_API_PORT", "8741"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture(scope="module")
def apis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    g = LocalGrid(
        tmp_path_factory.mktemp("tenantsgrid"),
        port=PORT,
        redis_url=REDIS_URL,
        tenants={},
        env={"SANDGRID_AUTH_CACHE_S": "3600", "SANDGRID_WORKER__SNAPSHOT_STORE": "local"},
    )
    try:
        g.start([])
        g.spawn("api2", "serve", "--host", "127.0.0.1", "--port", str(PORT + 1))
        g.wait(lambda: _get(PORT + 1, "/v1/health", None).status_code < 600, "the second API")
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


def _get(port: int, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=30)


def statuses(token: str) -> list[int]:
    """``GET /v1/sessions`` with ``token`` on each API process."""
    return [_get(p, "/v1/sessions", token).status_code for p in (PORT, PORT + 1)]


def tenants(g: LocalGrid, *argv: str) -> subprocess.CompletedProcess[str]:
    """``sandgrid tenants ARGV`` as an operator runs it, against the grid's Redis."""
    return subprocess.run(
        [*SANDGRID, "tenants", *argv], env=g.env, capture_output=True, text=True, timeout=60
    )


def create(port: int, token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/sessions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_rotate_and_revoke_are_refused_at_once_by_every_api(apis: LocalGrid) -> None:
    added = tenants(apis, "add", "rotco")
    assert added.returncode == 0, added.stderr
    old = added.stdout.strip()
    assert statuses(old) == [200, 200]  # both caches now hold the token for an hour

    rotated = tenants(apis, "rotate", "rotco")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert "2 API process(es) confirmed" in rotated.stderr, rotated.stderr
    assert statuses(old) == [401, 401]
    assert statuses(new) == [200, 200]

    revoked = tenants(apis, "revoke", "rotco")
    assert revoked.returncode == 0 and "1 token(s) revoked" in revoked.stderr, revoked.stderr
    assert statuses(new) == [401, 401]


def test_set_holds_for_the_next_request_and_a_bad_ceiling_is_refused(apis: LocalGrid) -> None:
    token = tenants(apis, "add", "setco").stdout.strip()
    assert statuses(token) == [200, 200]
    wide = {"type": "python", "network": {"allow": ["example.com:443"]}}
    assert create(PORT, token, wide).status_code == 503  # within '*': no worker, then

    bad = tenants(apis, "set", "setco", "--network-ceiling", "pypi.org:443,10.0.0.0/33")
    assert bad.returncode == 1
    assert "network_ceiling[1]: entry '10.0.0.0/33'" in bad.stderr, bad.stderr
    assert '"network_ceiling": [\n    "*"\n  ]' in tenants(apis, "show", "setco").stdout

    narrow = tenants(apis, "set", "setco", "--network-ceiling", "pypi.org:443")
    assert narrow.returncode == 0, narrow.stderr
    for port in (PORT, PORT + 1):
        refused = create(port, token, wide)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["context"]["field"] == "network.allow[0]"
