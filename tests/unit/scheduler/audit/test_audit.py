"""The audit trail on real Redis (db 15) and the local object store."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import redis

from sandgrid.audit import MAX_AUDIT_LIMIT
from sandgrid.errors import InvalidInput
from sandgrid.models import ExecRequest, ExecResult, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import WriteOp, WriteResult
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.objects.local import LocalObjects
from scheduler.audit.describe import command_fields
from scheduler.audit.export import AuditExporter
from scheduler.audit.log import AuditLog


@pytest.fixture
def log(redis_client: redis.Redis[str], tmp_path: Path) -> AuditLog:
    return AuditLog(redis_client, LocalObjects(tmp_path), command_chars=5)


def _session(tenant: str = "acme", sid: str = "s-1") -> SessionInfo:
    return SessionInfo.model_validate(
        {
            "id": sid,
            "tenant": tenant,
            "type": "python",
            "state": "live",
            "quotas": {},
            "created_at": "2026-01-01T00:00:00Z",
            "last_used": "2026-01-01T00:00:00Z",
        }
    )


def test_a_command_is_kept_as_its_digest_and_its_first_characters() -> None:
    digest, head = command_fields(ExecRequest(shell="echo secret-arg"), 4)
    assert digest == "sha256:" + hashlib.sha256(b"echo secret-arg").hexdigest()
    assert head == "echo"
    assert command_fields(ExecRequest(argv=["ls", "-l a"]), 0) == (
        "sha256:" + hashlib.sha256(b"ls '-l a'").hexdigest(),
        None,
    )


def test_a_turn_is_recorded_without_env_or_contents(log: AuditLog) -> None:
    request = ExecRequest(shell="cat /etc/passwd", env={"KEY": "env-value"})
    job = TurnJob(turn_id="t-1", session=_session(), op=ExecOp(request=request))
    out = TurnOutcome(
        turn_id="t-1", node="w1", ok=True, result=ExecResult(exit_code=2, stdout="ab")
    )
    log.turn(job, out, None, 12.5)
    write = TurnJob(
        turn_id="t-2", session=_session(), op=WriteOp(files=[{"path": "f", "content": "file-body"}])
    )
    log.turn(
        write,
        TurnOutcome(turn_id="t-2", node="w1", ok=True, result=WriteResult(written=1)),
        None,
        3.0,
    )
    records = log.query("acme", order="asc").records
    assert [r.action for r in records] == ["exec", "write"]
    assert (
        records[0].exit_code == 2 and records[0].node == "w1" and records[0].command_head == "cat /"
    )
    assert records[1].bytes == len("file-body")
    raw = json.dumps(log.redis.xrange(names.audit_key("acme")))
    assert "env-value" not in raw and "file-body" not in raw and "passwd" not in raw


def test_a_tenant_reads_only_its_own_records(log: AuditLog) -> None:
    log.record("acme", "s-1", "session_create")
    log.record("globex", "s-2", "session_create")
    assert [r.session for r in log.query("acme").records] == ["s-1"]
    assert [r.session for r in log.query("globex").records] == ["s-2"]
    assert log.query("acme", session="s-2").records == []


def test_limit_and_since_are_enforced(log: AuditLog) -> None:
    for _ in range(3):
        log.record("acme", "s-1", "exec")
    page = log.query("acme", limit=2)
    assert len(page.records) == 2 and page.more
    assert log.query("acme", since=time.time() + 5).records == []
    for bad in (0, MAX_AUDIT_LIMIT + 1):
        with pytest.raises(InvalidInput) as err:
            log.query("acme", limit=bad)
        assert err.value.context["field"] == "limit"
    with pytest.raises(InvalidInput) as err:
        log.query("acme", since=-1)
    assert err.value.context["field"] == "since"


def test_export_writes_segments_first_then_trims_and_loses_nothing(
    log: AuditLog, redis_client: redis.Redis[str], tmp_path: Path
) -> None:
    for i in range(5):
        log.record("acme", f"s-{i}", "exec")
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    assert exporter.export(now=time.time() + 1) == 5
    assert redis_client.xlen(names.audit_key("acme")) == 0
    segments = list((tmp_path / "t" / "acme" / "audit").rglob("*.jsonl"))
    assert len(segments) == 1 and len(segments[0].read_text().splitlines()) == 5
    log.record("acme", "s-late", "exec")
    assert [r.session for r in log.query("acme", order="asc").records] == [
        f"s-{i}" for i in range(5)
    ] + ["s-late"]


def test_a_crash_between_export_and_trim_duplicates_nothing(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    for i in range(3):
        log.record("acme", f"s-{i}", "exec")
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    real_xtrim = redis_client.xtrim
    redis_client.xtrim = lambda *a, **k: 0  # type: ignore[method-assign]
    exporter.export(now=time.time() + 1)  # exported, not trimmed: in both places
    assert len(log.query("acme").records) == 3
    redis_client.xtrim = real_xtrim  # type: ignore[method-assign]
    exporter.export(now=time.time() + 1)  # the same segment key again, then trimmed
    assert len(log.query("acme").records) == 3
    assert redis_client.xlen(names.audit_key("acme")) == 0


def test_records_younger_than_keep_stay_in_the_stream(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    log.record("acme", "s-1", "exec")
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=3600)
    assert exporter.export() == 0
    assert redis_client.xlen(names.audit_key("acme")) == 1


def test_one_exporter_at_a_time(log: AuditLog, redis_client: redis.Redis[str]) -> None:
    log.record("acme", "s-1", "exec")
    redis_client.set(names.audit_export_lock_key(), "other", px=10_000)
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    assert exporter.export(now=time.time() + 1) == 0
    assert redis_client.get(names.audit_export_lock_key()) == "other"
