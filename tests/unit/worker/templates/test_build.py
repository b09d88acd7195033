"""A build's end is always written in its record (25.2): an engine error is ``failed``, never a
record left ``building``; a job whose record is gone or another build's is refused."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from unittest import mock

import pytest
import redis

from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.templates import TemplateInfo, TemplateSpec
from sandgrid.wire.builds import BuildJob, TemplateStore
from worker.templates.build import TemplateBuilder
from worker.templates.errors import BuildFailed


def _job(build_id: str = "ab" * 8) -> BuildJob:
    spec = TemplateSpec.model_validate(
        {"name": "tpl", "from": "python", "steps": [{"run": "true"}]}
    )
    base = SandboxTypeSpec(name="python", image="sandgrid/sandbox-python:latest", runtime="runc")
    return BuildJob(build_id=build_id, tenant="acme", spec=spec, base=base)


def _builder(redis_client: redis.Redis[str], client: mock.Mock) -> TemplateBuilder:
    return TemplateBuilder(
        "n1",
        client,
        redis_client,
        mock.Mock(),
        egress=None,
        egress_port=3128,
        registry="",
        runsc_root=Path("/nonexistent"),
    )


def _record(redis_client: redis.Redis[str], build_id: str = "ab" * 8) -> None:
    now = time.time()
    info = TemplateInfo(
        name="tpl", tenant="acme", base="python", build_id=build_id, state="building",
        created=now, deadline=now + 60,
    )  # fmt: skip
    assert TemplateStore(redis_client).create(info)


def test_an_engine_error_ends_the_build_failed_in_its_record(
    redis_client: redis.Redis[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="worker.templates.build")
    client = mock.Mock()
    client.api.inspect_image.return_value = {"Id": "sha256:" + "0" * 64}
    client.containers.create.side_effect = RuntimeError("engine gone")
    _record(redis_client)
    done = _builder(redis_client, client).build(_job())
    assert done.state == "failed" and done.error == "the build failed on the node (RuntimeError)"
    stored = TemplateStore(redis_client).get("acme", "tpl")
    assert stored is not None and stored.state == "failed" and stored.finished is not None
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert re.fullmatch(rf"template build {'ab' * 8}: (\w+_ms=[\d.]+ ?)+", debug[-1]), debug


def test_a_job_of_another_build_is_refused(redis_client: redis.Redis[str]) -> None:
    _record(redis_client, build_id="cd" * 8)
    with pytest.raises(BuildFailed):
        _builder(redis_client, mock.Mock()).build(_job())
    stored = TemplateStore(redis_client).get("acme", "tpl")
    assert stored is not None and stored.state == "building"  # the other build's record stands
