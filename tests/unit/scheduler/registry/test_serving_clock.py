"""How long Redis has served, counted from a promotion too (issue 22.5).

A promoted replica's uptime is as long as the group's, while the heartbeat
records it holds lapsed during the failover: the API must count it from the
moment it first sees it, or it takes live nodes for lost and sends their turns
again.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.registry.serving import ServingClock
from tests.support.fakes import Grid, LapsingHolder


class FakeInfo:
    """``INFO server replication`` of a server that can restart or be replaced."""

    def __init__(self, run_id: str = "r1", replid: str = "a", uptime: float = 1000.0) -> None:
        self.run_id, self.replid, self.uptime = run_id, replid, uptime

    def info(self, *sections: str) -> dict[str, Any]:
        assert sections == ("server", "replication")
        return {
            "uptime_in_seconds": int(self.uptime),
            "run_id": self.run_id,
            "master_replid": self.replid,
        }


def _clock(start: float = 50.0) -> tuple[list[float], Any]:
    now = [start]
    return now, lambda: now[0]


def test_the_first_server_is_taken_at_its_uptime() -> None:
    now, clock = _clock()
    serving = ServingClock(FakeInfo(uptime=1000), clock=clock)  # type: ignore[arg-type]
    assert serving.served_s() == 1000
    now[0] += 5
    assert serving.served_s() == 1000  # INFO's whole seconds; at most the uptime


def test_a_promoted_replica_counts_from_when_it_is_first_seen() -> None:
    server = FakeInfo(uptime=1000)
    now, clock = _clock()
    serving = ServingClock(server, clock=clock)  # type: ignore[arg-type]
    serving.prime()
    server.run_id, server.replid, server.uptime = "r2", "b", 5000  # its own long uptime
    now[0] += 10
    assert serving.served_s() == 0
    now[0] += 2
    assert serving.served_s() == 2


def test_a_replica_promoted_again_without_a_restart_is_a_new_primary() -> None:
    server = FakeInfo(uptime=1000)
    now, clock = _clock()
    serving = ServingClock(server, clock=clock)  # type: ignore[arg-type]
    serving.prime()
    server.replid = "b"  # same process (run id), promoted again: a new replication id
    now[0] += 3
    assert serving.served_s() == 0


def test_a_restart_is_counted_from_its_uptime_when_that_is_shorter() -> None:
    server = FakeInfo(uptime=1000)
    now, clock = _clock()
    serving = ServingClock(server, clock=clock)  # type: ignore[arg-type]
    serving.prime()
    now[0] += 60
    server.run_id, server.uptime = "r3", 1
    assert serving.served_s() == 0  # first seen now
    now[0] += 30
    server.uptime = 31
    assert serving.served_s() == 30


def test_prime_rides_over_redis_away() -> None:
    class Down:
        def info(self, *sections: str) -> dict[str, Any]:
            raise __import__("redis").ConnectionError("away")

    ServingClock(Down()).prime()  # type: ignore[arg-type]


class FailoverHolder(LapsingHolder):
    """The lapse is a Sentinel failover: a replica is promoted (a new run id and
    replication id, a long uptime)."""

    def __init__(self, grid: Grid, node: str, server: FakeInfo) -> None:
        super().__init__(grid.services.registry.ledger, node=node)
        self.server = server

    def lapse(self) -> None:
        self.server.run_id, self.server.replid, self.server.uptime = "r2", "b", 9000


def test_a_record_lapsed_in_a_failover_is_no_death_within_the_grace(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = grid.services.registry
    server = FakeInfo(uptime=1000)
    monkeypatch.setattr(reg.serving, "redis", server)
    reg.serving.prime()
    grid.services.runner.restart_grace_s = 60.0
    reg.ledger.heartbeat("w6", 30, incarnation="inc-a", types=["python"])
    worker = FailoverHolder(grid, "w6", server)
    grid.services.runner.dispatcher = worker
    grid.worker = worker
    sid = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    r = grid.http.post(f"/v1/sessions/{sid}/exec", json={"shell": "x"}, headers=grid.headers())
    assert r.status_code == 200, r.text
    assert [j.attempt for j, _ in worker.sent] == [1]  # before 22.5: sent again (1, 2)
