"""The SDK retries what is safe to retry, with bounded backoff, and nothing else.

An httpx mock transport plays the API; sleeps are recorded, not slept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from sandgrid.client import AsyncClient, Client, RetryPolicy
from sandgrid.errors import ErrorCode, InfrastructureError, LimitExceeded

SESSION = {
    "id": "s-1",
    "tenant": "acme",
    "type": "python",
    "quotas": {},
    "created_at": "2026-01-01T00:00:00Z",
    "last_used": "2026-01-01T00:00:00Z",
}
RESULT = {"exit_code": 0, "stdout": "hi\n"}


def _error(status: int, code: str, retry_after: float = 1.0) -> httpx.Response:
    body = {
        "error": {
            "type": "LimitExceeded" if status == 429 else "InfrastructureError",
            "code": code,
            "message": code,
            "context": {"retry_after": retry_after},
            "retryable": True,
        }
    }
    return httpx.Response(status, json=body, headers={"Retry-After": str(int(retry_after))})


class Api:
    """Answers each request with the next of ``answers``; records the requests."""

    def __init__(self, *answers: httpx.Response | type[httpx.HTTPError]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, type):
            raise answer("boom", request=request)
        return answer


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The test thread's sleeps, recorded and not slept. Other threads of the process
    (a library's background thread that an earlier test started) still sleep for
    real: they would otherwise spin, filling the record and the CPU."""
    waits: list[float] = []
    test_thread, real_sleep, real_async_sleep = threading.get_ident(), time.sleep, anyio.sleep

    def fake_sleep(s: float) -> None:
        if threading.get_ident() == test_thread:
            waits.append(s)
        else:
            real_sleep(s)

    async def fake_async_sleep(s: float) -> None:
        if threading.get_ident() == test_thread:
            waits.append(s)
        else:
            await real_async_sleep(s)

    monkeypatch.setattr("time.sleep", fake_sleep)
    monkeypatch.setattr(anyio, "sleep", fake_async_sleep)
    yield waits


def _client(api: Api, **kw: Any) -> Client:
    return Client("http://api", "tok", transport=httpx.MockTransport(api), **kw)


def test_a_get_is_retried_on_503_registry_unavailable_honouring_retry_after(
    slept: list[float],
) -> None:
    api = Api(
        _error(503, "registry_unavailable", 2.0),
        _error(503, "store_unavailable", 1.0),
        httpx.Response(200, json=SESSION),
    )
    assert _client(api).get_session("s-1").id == "s-1"
    assert len(api.requests) == 3 and slept == [2.0, 1.0]


def test_retries_are_bounded(slept: list[float]) -> None:
    api = Api(*[_error(503, "registry_unavailable", 1.0)] * 10)
    with pytest.raises(InfrastructureError) as info:
        _client(api, retries=RetryPolicy(attempts=3, max_wait_s=0.5)).get_session("s-1")
    assert info.value.code == ErrorCode.REGISTRY_UNAVAILABLE
    assert len(api.requests) == 3 and slept == [0.5, 0.5]
    api = Api(*[_error(503, "registry_unavailable", 1.0)] * 10)
    with pytest.raises(InfrastructureError):
        _client(api, retries=RetryPolicy(attempts=10, total_s=2.5)).get_session("s-1")
    assert sum(slept[2:]) <= 2.5


def test_backoff_doubles_when_the_server_gives_no_hint(slept: list[float]) -> None:
    api = Api(*[_error(503, "registry_unavailable", 0.0)] * 3, httpx.Response(200, json=SESSION))
    _client(api, retries=RetryPolicy(attempts=4, backoff_s=0.1)).get_session("s-1")
    assert slept == pytest.approx([0.1, 0.2, 0.4])


def test_exec_is_retried_under_one_idempotency_key(slept: list[float]) -> None:
    api = Api(
        httpx.ReadTimeout, _error(503, "registry_unavailable"), httpx.Response(200, json=RESULT)
    )
    assert _client(api).exec("s-1", shell="echo hi").stdout == "hi\n"
    keys = {r.headers["Idempotency-Key"] for r in api.requests}
    assert len(api.requests) == 3 and len(keys) == 1
    api = Api(httpx.Response(200, json=RESULT), httpx.Response(200, json=RESULT))
    client = _client(api)
    client.exec("s-1", shell="a")
    client.exec("s-1", shell="a", idempotency_key="mine-0001")
    assert api.requests[0].headers["Idempotency-Key"] != "mine-0001"
    assert api.requests[1].headers["Idempotency-Key"] == "mine-0001"


def test_a_write_without_a_key_is_not_retried_once_sent(slept: list[float]) -> None:
    for answer in (_error(503, "registry_unavailable"), httpx.ReadTimeout):
        api = Api(answer, httpx.Response(200, json={"written": 1}))
        with pytest.raises(InfrastructureError):
            _client(api).write_files("s-1", {"a": "x"})
        assert len(api.requests) == 1
    api = Api(_error(503, "worker_lost"), httpx.Response(200, json=RESULT))
    with pytest.raises(InfrastructureError):
        _client(api).exec("s-1", shell="x")  # not an unavailability: the caller decides
    assert len(api.requests) == 1 and slept == []


def test_what_never_reached_the_api_and_429_are_retried_for_any_call(slept: list[float]) -> None:
    api = Api(
        httpx.ConnectError, _error(429, "backpressure", 1.0), httpx.Response(201, json=SESSION)
    )
    assert _client(api).create_session().id == "s-1"
    assert len(api.requests) == 3
    api = Api(_error(429, "tenant_limit", 30.0), httpx.Response(201, json=SESSION))
    with pytest.raises(LimitExceeded):  # asks for longer than a retry may wait
        _client(api).create_session()


def test_no_capacity_refused_at_admission_is_retried_for_any_call(slept: list[float]) -> None:
    """A type no live worker serves yet (a worker restarting) is refused before anything
    is done, with a Retry-After: a session create waits for it like a 429."""
    api = Api(_error(503, "no_capacity", 5.0), httpx.Response(201, json=SESSION))
    assert _client(api).create_session().id == "s-1"
    assert len(api.requests) == 2 and slept == [4.0]  # the hint, capped by max_wait_s
    api = Api(_error(503, "no_capacity", 0.0), httpx.Response(201, json=SESSION))
    with pytest.raises(InfrastructureError):  # no hint: not the admission's refusal
        _client(api).create_session()
    assert len(api.requests) == 1


def test_retries_zero_never_retries(slept: list[float]) -> None:
    api = Api(_error(503, "registry_unavailable"), httpx.Response(200, json=SESSION))
    with pytest.raises(InfrastructureError):
        _client(api, retries=0).get_session("s-1")
    assert len(api.requests) == 1


def test_the_async_client_retries_the_same(slept: list[float]) -> None:
    api = Api(_error(503, "registry_unavailable", 1.0), httpx.Response(200, json=RESULT))

    async def scenario() -> str:
        async with AsyncClient("http://api", "tok", transport=httpx.MockTransport(api)) as c:
            return (await c.exec("s-1", shell="echo")).stdout

    assert anyio.run(scenario) == "hi\n"
    assert len(api.requests) == 2 and slept == [1.0]
    assert api.requests[0].headers["Idempotency-Key"] == api.requests[1].headers["Idempotency-Key"]
