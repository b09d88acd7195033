"""Chaos: Redis, MinIO and the Docker engine each go down and come back during load.

Three sessions run turns (each appends its number to its own file) while one
service of the grid is stopped for a few seconds and started again. What each
proves is in docs/reliability.md; in short:

- Redis (with AOF, as production runs it): the registry and the broker come
  back whole; while it is down the API answers 503 ``registry_unavailable``,
  never a 500, and says the turn did not run (issue 11, items 1-2);
- MinIO: a turn that ran is answered with its output even when its snapshot
  could not be saved; one that could not restore answers 503
  ``store_unavailable`` and did not run (items 2-3);
- dockerd: the workers notice, rebuild their pools and reconcile their
  containers; the sessions go on from their snapshots (item 6).

In all three: nothing acknowledged is lost, nothing runs twice, every error
says whether its turn ran, no container is left behind, and turns are
acknowledged again after the fault.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chaos.accounting import Accounting
from tests.chaos.conftest import ChaosGrid, Window
from tests.chaos.load import Load

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SESSIONS = 3


def _scenario(
    name: str, grid: ChaosGrid, fault: Callable[[], Window], report: Callable[[Accounting], None]
) -> Accounting:
    accounting = Accounting(name)
    with grid.client() as client:
        Load(client, accounting, SESSIONS).under(fault)
    accounting.containers_left = grid.shutdown()
    report(accounting)
    return accounting


def test_redis_restart_during_load(
    chaos_grid: ChaosGrid,
    restart_redis: Callable[[], Window],
    report: Callable[[Accounting], None],
) -> None:
    accounting = _scenario("Redis restart during load", chaos_grid, restart_redis, report)
    assert accounting.violations() == []
    assert "internal" not in accounting.error_codes()


def test_minio_stop_and_start_during_load(
    chaos_grid: ChaosGrid,
    restart_minio: Callable[[], Window],
    report: Callable[[Accounting], None],
) -> None:
    accounting = _scenario("MinIO stop and start during load", chaos_grid, restart_minio, report)
    assert accounting.violations() == []
    assert "internal" not in accounting.error_codes()


def test_dockerd_restart_during_load(
    chaos_grid: ChaosGrid,
    restart_dockerd: Callable[[], Window],
    report: Callable[[Accounting], None],
) -> None:
    accounting = _scenario("dockerd restart during load", chaos_grid, restart_dockerd, report)
    assert accounting.violations() == []
