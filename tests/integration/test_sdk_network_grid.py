"""23.17: the SDK asks a real grid for a network policy, on runc and on runsc.

``Client.session(network=...)`` creates a session whose sandbox reaches what the
policy allows (a web server of the test on 127.0.0.8, named by the policy and
by the tenant's ceiling); ``s.network()`` shows the policy and the attempts;
``s.set_network(...)`` changes it for the next connection; the async client
reads the same. Everything stays on loopback.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sandgrid.client import AsyncClient, Client
from sandgrid.errors import InvalidInput
from sandgrid.localgrid import LocalGrid
from sandgrid.models import NetworkPolicy
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.support.egress_servers import free_port, http_server

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_SDK_NETWORK_API_PORT", "8743"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-sdknet-" + "a" * 24
WEB = "127.0.0.8"
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    work = tmp_path_factory.mktemp("sdknetgrid")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    tenant = Tenant(name="sdknet", limits=TenantLimits(network_ceiling=["*", WEB]))
    r.hset(names.tokens_key(), hash_token(TOKEN), tenant.model_dump_json())
    g = LocalGrid(
        work / "grid",
        port=PORT,
        redis_url=REDIS_URL,
        tenants={},
        env={
            "SANDGRID_WORKER__POOL_SIZE": "1",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__EGRESS__STATE_DIR": str(work / "egress"),
        },
    )
    try:
        g.start(["sdknet-w1"], types="python,python-gvisor", concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("web")
    (root / "hello.txt").write_text("hello over the policy\n")
    log: Path = root.parent / "web.log"
    with http_server(WEB, free_port(WEB), root, log) as url:
        yield url


@pytest.mark.parametrize("kind", RUNTIMES)
def test_session_with_network_and_its_live_policy(grid: LocalGrid, web: str, kind: str) -> None:
    fetch = f"curl -sS --max-time 20 {web}hello.txt"
    with Client(grid.api_url, TOKEN) as c, c.session(kind, network={"allow": [WEB]}) as s:
        assert s.info.network == NetworkPolicy(allow=[WEB])
        got = s.exec(shell=fetch)
        assert got.exit_code == 0 and got.stdout == "hello over the policy\n", got
        view = s.network()
        assert view.policy == NetworkPolicy(allow=[WEB])
        assert view.connections >= 1 and view.bytes > 0
        assert view.attempts and view.attempts[-1].allowed and view.attempts[-1].host == WEB

        assert s.set_network({"allow": []}).network == NetworkPolicy(allow=[])
        refused = s.exec(shell=fetch)  # the proxy answers the refusal (an HTTP 403)
        assert f"egress to {WEB}:" in refused.stdout and "denied" in refused.stdout, refused
        assert "hello over the policy" not in refused.stdout
        last = s.network().attempts[-1]
        assert not last.allowed and last.host == WEB
        with pytest.raises(InvalidInput, match=r"network\.allow\[0\]"):
            s.set_network({"allow": ["10.0.0.5"]})  # beyond the tenant's ceiling: 422

        async def read() -> NetworkPolicy | None:
            async with AsyncClient(grid.api_url, TOKEN) as ac:
                return (await ac.network(s.id, limit=1)).policy

        assert asyncio.run(read()) == NetworkPolicy(allow=[])
