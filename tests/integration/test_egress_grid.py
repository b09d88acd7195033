"""Egress through a real grid, on runc and on runsc: pip, git, refusals, live change, audit.

A grid of its own (API and two workers serving ``python`` and ``python-gvisor``)
whose egress proxies map ``pypi.test`` and ``git.test`` to a pypiserver and a
dumb-HTTP git server on 127.0.0.5 and 127.0.0.6 (the resolver override, a
test-only setting). Everything stays on loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.integration.test_egress_limits import Listener, own_address
from tests.support.egress_servers import build_wheel, git_server, pypi_server

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_EGRESS_API_PORT", "8719"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODES = ("egress-w1", "egress-w2")
TYPES = "python,python-gvisor"
NET_TOKEN = "tok-netco-" + "e" * 24
PLAIN_TOKEN = "tok-plain-" + "f" * 24
PYPI, GIT = "127.0.0.5", "127.0.0.6"
#: ``leak-check.invalid`` is a made-up name mapped by the override, so that even a
#: broken proxy sends no DNS query for it: a record with its address means a lookup.
HOSTS = {
    "pypi.test": PYPI,
    "git.test": GIT,
    "redis.test": "127.0.0.1",
    "leak-check.invalid": "127.0.0.1",
}
PIP_POLICY = {"allow": ["pypi.test", PYPI]}
PIP = "pip install -q --user --trusted-host pypi.test --index-url http://pypi.test/simple demo-pkg"
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    work = tmp_path_factory.mktemp("egressgrid")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    ceiling = TenantLimits(network_ceiling=["*", PYPI, GIT])
    r.hset(
        names.tokens_key(),
        hash_token(NET_TOKEN),
        Tenant(name="netco", limits=ceiling).model_dump_json(),
    )
    build_wheel(work / "packages")
    g = LocalGrid(
        work / "grid",
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"plain": PLAIN_TOKEN},
        env={
            "SANDGRID_WORKER__POOL_SIZE": "1",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__EGRESS__STATE_DIR": str(work / "egress"),
            "SANDGRID_WORKER__EGRESS__HOSTS": json.dumps(HOSTS),
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_LEASE_TTL_S": "4",
        },
    )
    with (
        pypi_server(PYPI, 80, work / "packages", work / "pypi.log"),
        git_server(GIT, 80, work / "git", work / "git.log"),
    ):
        try:
            g.start(list(NODES), types=TYPES, concurrency=2)
            yield g
        finally:
            g.stop()
            r.flushdb()
            r.close()


def call(g: LocalGrid, method: str, path: str, body: Any = None, token: str = NET_TOKEN) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    resp = httpx.request(method, f"{g.api_url}{path}", json=body, headers=headers, timeout=120)
    assert resp.status_code < 300, resp.text
    return resp.json()


def session(g: LocalGrid, kind: str, network: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"type": kind}
    if network is not None:
        body["network"] = network
    return str(call(g, "POST", "/v1/sessions", body)["id"])


def sh(g: LocalGrid, sid: str, command: str, env: dict[str, str] | None = None) -> Any:
    return call(g, "POST", f"/v1/sessions/{sid}/exec", {"shell": command, "env": env or {}})


def attempts(g: LocalGrid, sid: str) -> list[dict[str, Any]]:
    return list(call(g, "GET", f"/v1/sessions/{sid}/network")["attempts"])


@pytest.mark.parametrize("kind", RUNTIMES)
def test_pip_install_when_allowed_and_the_proxys_denial_by_default(grid, kind) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, kind, PIP_POLICY)
    out = sh(grid, sid, f"{PIP} && python3 -c 'import demo_pkg; print(demo_pkg.HELLO)'")
    assert out["exit_code"] == 0 and out["stdout"].strip() == "from the index", out
    seen = attempts(grid, sid)
    assert seen and all(a["allowed"] and a["host"] == "pypi.test" for a in seen)
    assert seen[0]["address"] == PYPI and seen[0]["received"] > 0

    offline = session(grid, kind)  # no policy: pip (told to use the index) is refused
    loud = PIP.replace(" -q ", " -vvv ")  # pip logs a refused index page at debug level
    out = sh(grid, offline, loud, env={"PIP_NO_INDEX": "0"})
    assert out["exit_code"] != 0
    assert "egress to pypi.test:80 denied: no network policy" in out["stdout"] + out["stderr"]
    assert attempts(grid, offline)[0]["allowed"] is False


@pytest.mark.parametrize("kind", RUNTIMES)
def test_an_offline_session_never_has_a_name_resolved(grid, kind) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, kind)  # no policy
    proxy = "curl -sS --noproxy '' -x http://127.0.0.1:3128"
    out = sh(
        grid,
        sid,
        f"{proxy} -p http://localhost:6379/; {proxy} -p https://leak-check.invalid/; "
        f"{proxy} http://leak-check.invalid/; "
        "curl -sS --noproxy '' --socks5-hostname 127.0.0.1:3128 http://leak-check.invalid/",
    )
    text = out["stdout"] + out["stderr"]
    assert "egress to leak-check.invalid:80 denied: no network policy" in text, out
    seen = attempts(grid, sid)
    assert [(a["host"], a["port"], a["protocol"]) for a in seen] == [
        ("localhost", 6379, "connect"),
        ("leak-check.invalid", 443, "connect"),
        ("leak-check.invalid", 80, "http"),
        ("leak-check.invalid", 80, "socks5"),
    ]
    assert all((a["allowed"], a["resolved"], a["address"]) == (False, False, "") for a in seen), (
        seen
    )


@pytest.mark.parametrize("kind", RUNTIMES)
def test_git_clone_over_dumb_http(grid, kind) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, kind, {"allow": ["git.test", GIT]})
    out = sh(grid, sid, "git clone -q http://git.test/demo.git repo && cat repo/README")
    assert out["exit_code"] == 0 and out["stdout"] == "hello over dumb http\n", out


@pytest.mark.parametrize("kind", RUNTIMES)
def test_redis_and_private_literals_refused_under_allow_all(grid, kind) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, kind, {"allow": ["*"]})
    out = sh(grid, sid, "curl -sS http://redis.test:6379/; curl -sS http://10.0.0.5:6379/")
    assert "egress to redis.test:6379 denied: loopback address" in out["stdout"], out
    assert "egress to 10.0.0.5:6379 denied: private address" in out["stdout"], out
    socks = "curl -sS --noproxy '' --socks5-hostname 127.0.0.1:3128 http://127.0.0.1:6379/"
    assert sh(grid, sid, socks)["exit_code"] != 0
    assert [a["rule"] for a in attempts(grid, sid)] == [
        "loopback address",
        "private address",
    ] * 1 + ["loopback address"]


@pytest.mark.parametrize("kind", RUNTIMES)
def test_allow_all_cannot_reach_the_hosts_own_address(grid, kind) -> None:  # type: ignore[no-untyped-def]
    addr = own_address()
    if addr is None:
        pytest.skip("this host has only loopback (and Docker bridge) addresses")
    listener = Listener(addr, b"you reached the host\n")
    try:
        sid = session(grid, kind, {"allow": ["*"]})
        out = sh(grid, sid, f"curl -sS http://{addr}:{listener.port}/")
        assert f"egress to {addr}:{listener.port} denied: host address" in out["stdout"], out
        assert listener.accepted == []
        [a] = attempts(grid, sid)
        assert (a["allowed"], a["rule"], a["address"]) == (False, "host address", addr)
    finally:
        listener.close()


@pytest.mark.parametrize("kind", RUNTIMES)
def test_live_policy_change_holds_for_the_next_connection(grid, kind) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, kind, PIP_POLICY)
    fetch = "curl -sS -o /dev/null -w '%{http_code}' http://pypi.test/simple/"
    assert sh(grid, sid, fetch)["stdout"] == "200"
    info = call(grid, "PATCH", f"/v1/sessions/{sid}/network", {"allow": ["example.com"]})
    assert info["network"]["allow"] == ["example.com"]
    assert sh(grid, sid, fetch)["stdout"] == "403"
    seen = attempts(grid, sid)
    assert [(a["allowed"], a["reason"]) for a in seen] == [
        (True, "allowed by rule 'pypi.test'"),
        (False, "not in the allow list"),
    ]
    assert all(a["duration_ms"] >= 0 and a["node"] in NODES for a in seen)


def test_a_policy_beyond_the_tenant_ceiling_is_422_naming_the_entry(grid) -> None:  # type: ignore[no-untyped-def]
    body = {"type": "python", "network": {"allow": ["pypi.org", PYPI]}}
    resp = httpx.post(
        f"{grid.api_url}/v1/sessions",
        json=body,
        headers={"Authorization": f"Bearer {PLAIN_TOKEN}"},
        timeout=30,
    )
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["context"]["field"] == "network.allow[1]" and PYPI in err["message"]
    bad = httpx.post(
        f"{grid.api_url}/v1/sessions",
        json={"type": "python", "network": {"allow": ["a b"]}},
        headers={"Authorization": f"Bearer {PLAIN_TOKEN}"},
        timeout=30,
    )
    assert bad.status_code == 422 and "network.allow[0]" in bad.text


def test_the_policy_survives_a_restore_on_another_worker(grid) -> None:  # type: ignore[no-untyped-def]
    sid = session(grid, "python", PIP_POLICY)
    first = sh(grid, sid, f"{PIP} && echo kept > note")
    assert first["exit_code"] == 0, first
    grid.kill(first["node"])  # its sandbox goes with it; the snapshot stays
    try:
        out = sh(
            grid, sid, "cat note; curl -sS -o /dev/null -w '%{http_code}' http://pypi.test/simple/"
        )
        assert out["node"] != first["node"] and out["stdout"] == "kept\n200", out
    finally:
        grid.start_worker(first["node"], types=TYPES, concurrency=2)


@pytest.mark.parametrize("kind", RUNTIMES)
def test_a_large_download_arrives_whole_and_is_counted(grid, kind) -> None:  # type: ignore[no-untyped-def]
    blob = os.urandom(1 << 20) * 32 + b"end"  # many splice chunks, in both relays
    (grid.workdir.parent / "git" / "srv" / "blob.bin").write_bytes(blob)  # the server root
    sid = session(grid, kind, {"allow": ["git.test", GIT]})
    for flag in ("", "--proxytunnel "):  # plain HTTP, then a CONNECT tunnel
        get = f"curl -sS -o blob.bin -w '%{{http_code}} %{{size_download}} ' {flag}http://git.test/blob.bin"
        out = sh(grid, sid, f"{get} && sha256sum blob.bin && rm blob.bin")
        want = f"200 {len(blob)} {hashlib.sha256(blob).hexdigest()}"
        assert out["stdout"].split()[:3] == want.split(), out
    seen = attempts(grid, sid)
    assert [a["protocol"] for a in seen] == ["http", "connect"]
    assert all(len(blob) < a["received"] < len(blob) + 4096 for a in seen), seen
