"""Admission: quota ceilings (422), turn slots and queue depth (429)."""

from __future__ import annotations

import pytest
import redis

from sandgrid.errors import ErrorCode, InvalidInput, LimitExceeded, NotFound
from sandgrid.models import ExecRequest, Quotas, SessionCreate
from sandgrid.wire import broker, names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from scheduler.registry.sessions import SessionRegistry
from scheduler.tenants import Tenant, TenantLimits
from scheduler.turns.admission import Admission, check_exec, check_quotas
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded

TENANT = Tenant(name="acme", limits=TenantLimits(max_cpus=2, max_concurrent_turns=2))


@pytest.mark.parametrize(
    ("quotas", "field"),
    [
        (Quotas(cpus=3), "quotas.cpus"),
        (Quotas(memory_mb=9000), "quotas.memory_mb"),
        (Quotas(timeout_s=3600, workspace_mb=5000), "quotas.workspace_mb"),
        (Quotas(network=True), "quotas.network"),
    ],
)
def test_quota_ceilings_name_the_field(quotas: Quotas, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        check_quotas(TENANT, quotas)
    assert exc.value.context["field"] == field and exc.value.context["rule"]


def test_quotas_within_ceilings_pass() -> None:
    check_quotas(TENANT, Quotas(cpus=2, memory_mb=8192))


def test_exec_deadline_ceiling() -> None:
    tenant = Tenant(name="t", limits=TenantLimits(max_timeout_s=10))
    check_exec(tenant, ExecRequest(shell="x", timeout_s=10))
    with pytest.raises(InvalidInput) as exc:
        check_exec(tenant, ExecRequest(shell="x", timeout_s=11))
    assert exc.value.context["field"] == "timeout_s"


def test_allowed_types(redis_client: redis.Redis[str]) -> None:
    adm = Admission(redis_client, SessionRegistry(redis_client), queue_depth_limit=10)
    tenant = Tenant(name="t", limits=TenantLimits(types=["python"]))
    adm.check_session(tenant, SessionCreate(type="python"))
    with pytest.raises(InvalidInput) as exc:
        adm.check_session(tenant, SessionCreate(type="python-gvisor"))
    assert exc.value.context["field"] == "type"
    with pytest.raises(NotFound, match="unknown sandbox type") as exc:  # 25.5: as a private one
        adm.check_session(Tenant(name="t"), SessionCreate(type="cobol"))
    assert exc.value.context["field"] == "type"


def test_queue_depth_backpressure(redis_client: redis.Redis[str]) -> None:
    adm = Admission(redis_client, SessionRegistry(redis_client), queue_depth_limit=3)
    redis_client.rpush("sbx.python", *"abc")
    adm.check_queue("sbx.python")
    redis_client.rpush("sbx.python", "d")
    with pytest.raises(LimitExceeded) as exc:
        adm.check_queue("sbx.python")
    assert exc.value.code == ErrorCode.BACKPRESSURE and exc.value.retry_after > 0
    assert exc.value.context["depth"] == 4


def test_turn_slots(redis_client: redis.Redis[str]) -> None:
    reg = SessionRegistry(redis_client)
    adm = Admission(redis_client, reg, queue_depth_limit=3)
    adm.acquire_turn(TENANT, "t1", 30)
    adm.acquire_turn(TENANT, "t2", 30)
    with pytest.raises(LimitExceeded) as exc:
        adm.acquire_turn(TENANT, "t3", 30)
    assert exc.value.code == ErrorCode.TENANT_LIMIT
    adm.release_turn(TENANT, "t1")
    adm.acquire_turn(TENANT, "t3", 30)
    assert reg.turns_in_flight("acme") == 2


def test_expired_slots_do_not_leak(redis_client: redis.Redis[str]) -> None:
    reg = SessionRegistry(redis_client)
    assert reg.acquire_turn_slot("acme", "t1", 1, 0.05)
    assert not reg.acquire_turn_slot("acme", "t2", 1, 5)
    import time

    time.sleep(0.08)
    assert reg.acquire_turn_slot("acme", "t2", 1, 5)


def test_admit_takes_slot_lock_and_record_or_nothing(redis_client: redis.Redis[str]) -> None:
    """One round trip for the three checks, in their order; a refusal takes nothing."""
    reg = SessionRegistry(redis_client)
    adm = Admission(redis_client, reg, queue_depth_limit=1)
    assert adm.admit(TENANT, "sbx.python", "s-1", "t1", 30)
    assert reg.turns_in_flight("acme") == 1
    assert reg.turn_state("t1")["state"] == "queued"
    assert not adm.admit(TENANT, "sbx.python", "s-1", "t2", 30)  # s-1 busy: nothing taken
    assert reg.turns_in_flight("acme") == 1 and reg.turn_state("t2") == {}
    assert adm.admit(TENANT, "sbx.python", "s-2", "t3", 30)
    with pytest.raises(LimitExceeded) as exc:  # the tenant's 2 slots are taken
        adm.admit(TENANT, "sbx.python", "s-3", "t4", 30)
    assert exc.value.code == ErrorCode.TENANT_LIMIT and exc.value.context["max"] == 2
    assert reg.begin_turn("s-3", "t5", 30)  # the refused admit left s-3's lock free
    reg.end_turn("s-3", "t5")
    redis_client.rpush("sbx.python", "a", "b")
    with pytest.raises(LimitExceeded) as exc:  # checked before the tenant's slots
        adm.admit(TENANT, "sbx.python", "s-3", "t6", 30)
    assert exc.value.code == ErrorCode.BACKPRESSURE and exc.value.context["depth"] == 2
    reg.end_turn("s-1", "t1")
    adm.release_turn(TENANT, "t1")
    redis_client.delete("sbx.python")
    assert not adm.admit(TENANT, "sbx.python", "s-1", "t7", 30)  # t2 waits before it
    reg.withdraw("s-1", "t2")
    assert adm.admit(TENANT, "sbx.python", "s-1", "t7", 30)


def test_a_session_runs_its_parallel_turns_and_the_next_waits_in_order(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    adm = Admission(redis_client, reg, queue_depth_limit=10)
    tenant = TENANT.model_copy(update={"limits": TenantLimits(max_concurrent_turns=10)})

    def admit(turn: str, shared: bool = False) -> bool:
        return adm.admit(tenant, "node.w1", "s-1", turn, 30, parallel=2, shared=shared)

    assert admit("a") and admit("b")
    assert not admit("c")  # both slots taken: c waits first
    assert not admit("d")
    reg.end_turn("s-1", "a")
    assert not admit("d")  # c came first
    assert admit("c") and not admit("d")
    assert reg.session_turns("s-1") == ["b", "c"]
    reg.end_turn("s-1", "b")
    reg.end_turn("s-1", "c")
    assert admit("d")
    assert not admit("e", shared=True)  # d is bringing the session to a worker: wait
    reg.end_turn("s-1", "d")
    assert admit("e", shared=True)


def test_an_op_alone_waits_for_the_turns_and_holds_back_the_next(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    adm = Admission(redis_client, reg, queue_depth_limit=10)
    tenant = TENANT.model_copy(update={"limits": TenantLimits(max_concurrent_turns=10)})
    assert adm.admit(tenant, "node.w1", "s-1", "a", 30, parallel=4)
    assert not reg.begin_turn("s-1", "pause", 30)  # a turn runs: the pause waits
    assert not adm.admit(tenant, "node.w1", "s-1", "b", 30, parallel=4)  # behind the pause
    reg.end_turn("s-1", "a")
    assert reg.begin_turn("s-1", "pause", 30)
    assert not adm.admit(tenant, "node.w1", "s-1", "b", 30, parallel=4)  # held alone
    reg.end_turn("s-1", "pause")
    assert adm.admit(tenant, "node.w1", "s-1", "b", 30, parallel=4)


def test_a_turn_to_a_queue_its_own_push_found_shallow_skips_the_depth_read(
    redis_client: redis.Redis[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22.1: the length a push answered (``LPUSH``) stands for the queue's depth
    for a second; at half the limit, or older, the depth is read again."""
    monkeypatch.setattr(broker, "_pushed", {})
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    adm = Admission(redis_client, SessionRegistry(redis_client), queue_depth_limit=4)
    assert adm.admit(TENANT, "sbx.python", "s-0", "t0", 30)  # the script loaded
    adm.release_turn(TENANT, "t0")  # the tenant's ceiling is 2
    app.send_task(names.TASK_PING, args=[1], queue="sbx.python")
    assert broker.pushed_depth("sbx.python") == 1
    with recorded(TEST_REDIS_URL) as seen:
        assert adm.admit(TENANT, "sbx.python", "s-1", "t1", 30)
    assert "LLEN" not in names_of(seen, "lua")
    adm.release_turn(TENANT, "t1")
    for _ in range(2):  # 3: above half the limit
        app.send_task(names.TASK_PING, args=[1], queue="sbx.python")
    redis_client.rpush("sbx.python", "x", "y")  # others' pushes, unseen here
    with pytest.raises(LimitExceeded) as exc:
        adm.admit(TENANT, "sbx.python", "s-2", "t2", 30)
    assert exc.value.code == ErrorCode.BACKPRESSURE and exc.value.context["depth"] == 5
    redis_client.delete("sbx.python")
    monkeypatch.setattr(broker, "DEPTH_FRESH_S", 0.0)  # the last push is too old to tell
    with recorded(TEST_REDIS_URL) as seen:
        assert adm.admit(TENANT, "sbx.python", "s-3", "t3", 30)
    assert "LLEN" in names_of(seen, "lua")
