"""run_code through the real grid: API, Celery, two workers (the grid of ``test_grid``).

The kernel keeps state between turns on the owner; when the owner dies, the
session goes on from its snapshot on the other worker and the first call there
says ``kernel_restarted``.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess

import httpx
import pytest
import redis

from sandgrid.client import AsyncClient, Client
from sandgrid.wire import names
from tests.integration.test_grid import (  # the same grid fixture, not a copy of it
    API,
    NODES,
    REDIS_URL,
    SANDGRID,
    TOKENS,
    GridProcs,
    _wait,
    _workers_seen,
    grid,
)

pytestmark = pytest.mark.integration
__all__ = ["grid"]


def test_state_figure_and_error_through_the_api(grid: GridProcs) -> None:
    with Client(API, TOKENS["acme"]) as c, c.session(type="python") as s:
        assert s.run_code("x = 1").error is None
        r = s.run_code("print('p'); x + 1")
        assert (r.stdout, r.result, r.kernel_restarted) == ("p\n", "2", False)
        assert r.node in NODES and "worker_ms" in r.timings
        fig = s.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        png = [d["image/png"] for d in fig.display if "image/png" in d]
        assert len(png) == 1 and base64.b64decode(png[0]).startswith(b"\x89PNG")
        err = s.run_code("undefined_name")
        assert err.error is not None and err.error.name == "NameError"


def test_bad_input_names_the_field(grid: GridProcs) -> None:
    with Client(API, TOKENS["acme"]) as c, c.session(type="python") as s:
        url = f"{API}/v1/sessions/{s.id}/code"
        auth = {"Authorization": f"Bearer {TOKENS['acme']}"}
        big = httpx.post(url, json={"code": "x" * ((1 << 20) + 1)}, headers=auth, timeout=30)
        assert big.status_code == 422 and "code" in big.text
        lang = httpx.post(url, json={"code": "1", "language": "r"}, headers=auth, timeout=30)
        assert lang.status_code == 422 and "language" in lang.text


def test_async_client_and_cli(grid: GridProcs) -> None:
    async def two_calls() -> str | None:
        async with AsyncClient(API, TOKENS["acme"]) as c:
            s = await c.create_session(type="python")
            await c.run_code(s.id, "y = 20")
            return (await c.run_code(s.id, "y * 2")).result

    assert asyncio.run(two_calls()) == "40"
    with Client(API, TOKENS["acme"]) as c, c.session(type="python") as s:
        s.run_code("z = 5")
        env = {**grid.env, "SANDGRID_TOKEN": TOKENS["acme"]}
        out = subprocess.run(
            [*SANDGRID, "code", s.id, "z + 1"], env=env, capture_output=True, timeout=120
        )
        assert (out.returncode, out.stdout) == (0, b"6\n"), out.stderr


def test_session_moved_to_another_worker_says_kernel_restarted(grid: GridProcs) -> None:
    with Client(API, TOKENS["acme"]) as c, c.session(type="python") as s:
        first = s.run_code("kept = 'in memory'\nopen('f.txt', 'w').write('on disk')")
        owner = first.node
        other = next(n for n in NODES if n != owner)
        grid.kill_worker(owner)
        r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        _wait(lambda: not r.exists(names.node_key(owner)), f"{owner}'s heartbeat to lapse", grid)
        after = s.run_code("'kept' in dir(), open('f.txt').read()")
        assert after.node == other and after.kernel_restarted
        assert after.result == "(False, 'on disk')"
        assert not s.run_code("1").kernel_restarted
    grid.start_worker(owner)
    _wait(lambda: owner in _workers_seen(), f"{owner} back", grid)
