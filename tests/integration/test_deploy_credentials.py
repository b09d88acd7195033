"""The generated credentials applied by the bring-up scripts (23.19), on private services.

``deploy/local/redis.sh`` and ``minio.sh`` run with a temporary state directory
and free loopback ports, first without credentials (the setup before 23.19:
Redis open to anyone, MinIO on ``sandgrid`` / ``sandgrid-secret``), then after
``credentials.sh``: each must restart its own service with the generated
credentials, keep the data, and refuse what it refused to take before. The
machine's own Redis and MinIO are never touched.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from minio import Minio
from minio.error import S3Error

from tests.conftest import generated_secrets
from tests.support.deploy_state import ROOT

pytestmark = pytest.mark.integration

SHARED_BIN = Path(os.environ.get("SANDGRID_STATE_DIR", "/var/lib/sandgrid")) / "bin"
FILES = ("secrets.env", "redis/users.acl", "metrics-token", "flower-password")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Services:
    state: Path
    redis_port: int
    minio_port: int

    @property
    def env(self) -> dict[str, str]:
        drop = ("SANDGRID_REDIS_URL", "SANDGRID_MINIO__ACCESS_KEY", "SANDGRID_MINIO__SECRET_KEY")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        return env | {
            "SANDGRID_STATE_DIR": str(self.state),
            "SANDGRID_BIN_DIR": str(SHARED_BIN),
            "SANDGRID_VENV": str(Path(sys.executable).parents[1]),
            "SANDGRID_REDIS_PORT": str(self.redis_port),
            "SANDGRID_MINIO__ENDPOINT": f"127.0.0.1:{self.minio_port}",
        }

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "deploy/local" / script)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, script: str) -> str:
        done = self.run(script)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    def redis(self, user: str | None = None, password: str | None = None) -> redis.Redis[str]:
        return redis.Redis(
            port=self.redis_port, username=user, password=password, decode_responses=True
        )

    def minio(self, key: str, secret: str) -> Minio:
        return Minio(f"127.0.0.1:{self.minio_port}", key, secret, secure=False)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    if not os.access(SHARED_BIN / "minio", os.X_OK):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no MinIO binary in {SHARED_BIN} in CI")
        pytest.skip(f"no MinIO binary in {SHARED_BIN}: run make services")
    svc = Services(tmp_path_factory.mktemp("sgcreds"), _free_port(), _free_port())
    try:
        yield svc
    finally:
        for name in ("redis", "minio"):
            pidfile = svc.state / "run" / f"{name}.pid"
            if pidfile.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pidfile.read_text()), signal.SIGTERM)


def test_credentials_apply_at_the_next_start_and_keep_the_data(services: Services) -> None:
    """Adversarial: after make services, no anonymous Redis client and no client on
    MinIO's shipped credentials gets in; every role has its own password and rules."""
    # before: the services as they ran without generated credentials
    services.ok("redis.sh")
    services.redis().set("kept", "yes")
    services.ok("minio.sh")
    shipped = services.minio("sandgrid", "sandgrid-secret")
    shipped.make_bucket("kept-bucket")
    shipped.put_object("kept-bucket", "o", io.BytesIO(b"data"), 4)

    services.ok("credentials.sh")
    for name in FILES:
        assert (services.state / name).stat().st_mode & 0o077 == 0, name
    secrets = generated_secrets(services.state)
    assert "restarting ours" in services.ok("redis.sh")
    assert "restarting ours" in services.ok("minio.sh")

    with pytest.raises(redis.AuthenticationError):
        services.redis().ping()
    with pytest.raises(redis.AuthenticationError):
        services.redis("sg-api", "wrong").ping()
    api = services.redis("sg-api", secrets["SG_REDIS_PW_API"])
    assert api.get("kept") == "yes"  # the AOF kept the data
    api.set("k", "v")
    for dangerous in (api.flushdb, api.config_get, lambda: api.keys("*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            dangerous()
    reader = services.redis("sg-metrics", secrets["SG_REDIS_PW_METRICS"])
    assert reader.get("k") == "v"
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.set("k", "w")

    with pytest.raises(S3Error):
        shipped.list_buckets()
    ours = services.minio(secrets["SG_MINIO_ACCESS_KEY"], secrets["SG_MINIO_SECRET_KEY"])
    assert ours.get_object("kept-bucket", "o").read() == b"data"


def test_a_second_run_changes_nothing(services: Services) -> None:
    before = {n: (services.state / n).read_text() for n in FILES}
    services.ok("credentials.sh")
    assert "running, with AOF" in services.ok("redis.sh")
    assert "minio: running" in services.ok("minio.sh")
    assert {n: (services.state / n).read_text() for n in FILES} == before


def test_an_open_redis_that_is_not_ours_is_reported(services: Services, tmp_path: Path) -> None:
    """The scripts never reconfigure a Redis they did not start: they say what to do."""
    services.ok("credentials.sh")
    port = _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        other = Services(services.state, port, services.minio_port)
        client = other.redis()
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        done = other.run("redis.sh")
        assert done.returncode != 0
        assert "not ours" in done.stderr and "--aclfile" in done.stderr
        assert client.ping()  # untouched
    finally:
        proc.kill()  # a throwaway server: nothing to persist
        proc.wait(timeout=10)
