"""Chaos: the Redis primary is killed under load and Sentinel fails over (issue 22.5).

The grid (API, two worker nodes, Celery's broker and result backend) runs on a
``sentinel://`` URL of a Sentinel set of its own (``tests/chaos/sentinel.py``:
``deploy/local/sentinel.sh`` on free ports). Three sessions run turns (each
appends its number to its file) while the primary is SIGKILLed; the sentinels
see it down after 1 s and promote the replica. What must hold (the same
accounting as the other outages, ``tests/chaos/accounting.py``):

- every turn acknowledged before, during and after the failover is in its
  file exactly once (none lost, none run twice);
- a turn during it answers a retryable error that says whether it ran
  (``registry_unavailable`` and friends), or succeeds; never a 500;
- turns are acknowledged again after the promotion, and the times from the
  kill to the promotion and to the first turn acknowledged after it are printed
  (docs/reliability.md keeps the latest table).

It runs with the grid's default heartbeat (a node is taken for lost after 9 s)
and with the other outages' 0.5 s one: there the failover outlasts the node TTL,
the API takes a live node for lost and sends its turn again, and the copy is
refused by that node's lease; the API then waits for the first copy's result
instead of answering ``session_busy`` (did not run) although it ran
(``scheduler.turns.recovery.TurnRecovery.on_refused``; docs/scale.md, Sentinel).

Security id 22.5 (docs/security.md): only sg-admin may reconfigure the sentinels.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from tests.chaos.accounting import Accounting
from tests.chaos.conftest import GRID_ENV, ChaosGrid, _unavailable, local_grid, running
from tests.chaos.load import Load
from tests.chaos.sentinel import MASTER, SentinelSet, unavailable_reason
from tests.chaos.services import PrivateDockerd, free_port
from tests.integration.test_snapshots_grid import PrivateMinio, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SESSIONS = 3


def _installable() -> str | None:
    """Why redis-sentinel cannot be had here (deploy/local installs it), or None."""
    if shutil.which("redis-sentinel"):
        return None
    try:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "redis-sentinel"],
            capture_output=True,
            timeout=300,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"redis-sentinel is not installed and apt-get could not install it: {exc}"
    return None


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    reason = unavailable_reason() or _installable()
    if reason:
        _unavailable(reason)
    group = SentinelSet(tmp_path / "sentinel")
    try:
        group.start()
        yield group
    finally:
        group.stop()


#: The grid's default heartbeat and lease (``sandgrid.wire.settings``): a node is
#: taken for lost after 3 beats (9 s), well past a failover (~2.5 s here).
PRODUCTION_BEATS = {"SANDGRID_HEARTBEAT_S": "3", "SANDGRID_LEASE_TTL_S": "15"}
#: The other outages' beats: a node is taken for lost after 1.5 s, inside a failover
#: (its turn is sent again, refused by its lease, and answered by its first copy).
CHAOS_BEATS = {"SANDGRID_HEARTBEAT_S": GRID_ENV["SANDGRID_HEARTBEAT_S"]}


@pytest.fixture(
    params=[
        pytest.param(PRODUCTION_BEATS, id="default-heartbeat"),
        pytest.param(CHAOS_BEATS, id="heartbeat-0.5s"),
    ]
)
def beats(request: pytest.FixtureRequest) -> dict[str, str]:
    return dict(request.param)


@pytest.fixture
def sentinel_grid(
    sentinels: SentinelSet,
    chaos_minio: PrivateMinio,
    chaos_dockerd: PrivateDockerd,
    beats: dict[str, str],
    tmp_path: Path,
) -> Iterator[ChaosGrid]:
    """The chaos grid, its Redis the Sentinel set's primary (found through the sentinels)."""
    local = local_grid(tmp_path, sentinels.url("api"), chaos_minio, chaos_dockerd, beats)
    # ChaosGrid's ``redis`` is the private server of the other outages; unused here
    with running(ChaosGrid(local, None, chaos_minio, chaos_dockerd)) as grid:  # type: ignore[arg-type]
        yield grid


def _recovery(accounting: Accounting, killed: float) -> float | None:
    """From the kill to the end of the first turn acknowledged that started after it."""
    ends = [c.started + c.latency_s for c in accounting.acknowledged if c.started >= killed]
    return min(ends) - killed if ends else None


def test_primary_killed_during_load_fails_over(
    sentinel_grid: ChaosGrid, sentinels: SentinelSet, report: object
) -> None:
    accounting = Accounting("Redis primary killed during load (Sentinel failover)")
    marks: dict[str, float] = {}

    def kill_primary() -> tuple[float, float]:
        marks["killed"] = time.monotonic()
        old = sentinels.kill_primary()
        marks["promoted"] = sentinels.wait_promoted(old)
        return marks["killed"], marks["promoted"]

    with sentinel_grid.client() as client:
        Load(client, accounting, SESSIONS).under(kill_primary)
    recovery = _recovery(accounting, marks["killed"])
    promoted = marks["promoted"] - marks["killed"]
    accounting.notes.append(f"kill -> replica promoted: {promoted:.2f} s")
    shown = "none" if recovery is None else f"{recovery:.2f} s"
    accounting.notes.append(f"kill -> first turn acknowledged that started after it: {shown}")
    accounting.containers_left = sentinel_grid.shutdown()
    report(accounting)  # type: ignore[operator]
    assert accounting.violations() == []
    assert "internal" not in accounting.error_codes()
    assert recovery is not None


def test_only_the_admin_may_reconfigure_the_sentinels(sentinels: SentinelSet) -> None:
    """22.5 (security): a sentinel decides where every client writes, so a service
    user may only ask where the primary is; changing the group, forcing a failover
    or reading its config is sg-admin's, and no password is no connection."""
    port = sentinels.sentinel_ports[0]
    api = redis.Redis(
        port=port,
        username="sg-api",
        password=sentinels.secrets["SG_REDIS_PW_API"],
        socket_timeout=2,
    )
    try:
        addr = api.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        assert int(addr[1]) == sentinels.primary_port()
        for command in (
            ("SENTINEL", "SET", MASTER, "down-after-milliseconds", "1"),
            ("SENTINEL", "FAILOVER", MASTER),
            ("SENTINEL", "REMOVE", MASTER),
            ("SENTINEL", "MONITOR", "evil", "127.0.0.1", "9", "1"),
            ("SENTINEL", "CONFIG", "GET", "*"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                api.execute_command(*command)
    finally:
        api.close()
    anonymous = redis.Redis(port=port, socket_timeout=2)
    try:
        with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
            anonymous.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
    finally:
        anonymous.close()
    admin = sentinels.admin(port)
    try:
        assert admin.execute_command("SENTINEL", "SET", MASTER, "parallel-syncs", "1")
    finally:
        admin.close()


def test_flower_follows_a_failover(sentinels: SentinelSet, tmp_path: Path) -> None:
    """22.5: Flower, on the grid's Celery app and a ``sentinel://`` URL, takes the
    events of a task sent after the primary was killed (its event consumer asks
    the sentinels again; events sent while it reconnects are missed, as in any
    outage: they are published, not queued)."""
    port, secret = free_port(), tmp_path / "flower-password"
    secret.write_text("flower-test-pw\n")
    secret.chmod(0o600)
    env = {
        **os.environ,
        "SANDGRID_REDIS_URL": sentinels.url("flower"),
        "SANDGRID_FLOWER_PASSWORD_FILE": str(secret),
    }
    args = ["-A", "sandgrid.wire.celery_app:app", "flower", "--address=127.0.0.1"]
    with (tmp_path / "flower.log").open("ab") as log:
        flower = subprocess.Popen(
            [sys.executable, "-m", "scheduler.flower", *args, f"--port={port}"],
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        tasks = _flower_tasks(port)
        wait_for(lambda: tasks() is not None, "Flower", 60)
        old = sentinels.kill_primary()
        sentinels.wait_promoted(old)
        app = make_celery(Settings(redis_url=sentinels.url("api")))

        def seen() -> bool:  # events are PUBLISHed: one sent before Flower is back is missed
            task_id = f"flower-failover-{uuid.uuid4().hex[:8]}"
            app.send_task(names.TASK_PING, args=[1], queue="flower-failover-check", task_id=task_id)
            time.sleep(0.5)
            return task_id in (tasks() or {})

        wait_for(seen, "a task sent after the failover in Flower", 60)
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(30)


def _flower_tasks(port: int) -> Callable[[], dict[str, object] | None]:
    def tasks() -> dict[str, object] | None:
        try:
            got = httpx.get(
                f"http://127.0.0.1:{port}/api/tasks", auth=("admin", "flower-test-pw"), timeout=5
            )
        except httpx.HTTPError:
            return None
        return got.json() if got.is_success else None

    return tasks
