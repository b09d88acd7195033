"""A Sentinel set of the chaos suite's own, started by ``deploy/local/sentinel.sh``.

The script (the one an operator runs) starts a primary, a replica and three
sentinels on free loopback ports, with its state, pid files and logs in a
directory of the test's, so the main Redis and any other test's servers are
not touched. The servers have the grid's ACL users (``/var/lib/sandgrid``'s
``users.acl`` and ``secrets.env``, read only). Each process is stopped by the
pid the script recorded (``sentinel.sh stop``), never by a process name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from sandgrid.wire.credentials import DEFAULT_STATE_DIR, generated_secrets
from tests.chaos.services import free_port

__all__ = ["SECRETS", "SentinelSet", "unavailable_reason"]

_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local" / "sentinel.sh"
STATE_DIR = Path(os.environ.get("SANDGRID_STATE_DIR", str(DEFAULT_STATE_DIR)))
SECRETS = STATE_DIR / "secrets.env"
MASTER = "sgchaos"


def unavailable_reason() -> str | None:
    """Why no Sentinel set can run here, or None."""
    if not SECRETS.exists() or not (SECRETS.parent / "redis" / "users.acl").exists():
        return f"no grid credentials ({SECRETS}, redis/users.acl): run make services"
    if os.geteuid() != 0 and not shutil.which("redis-sentinel"):
        return "redis-sentinel is not installed and this user cannot apt-get install it"
    return None


class SentinelSet:
    """A primary, a replica and three sentinels on free loopback ports.

    Args:
        workdir: the servers' data, config files, pid files and logs.
    """

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.ports = [free_port() for _ in range(5)]
        self.secrets = generated_secrets(STATE_DIR)
        self.env = {
            **os.environ,
            "SANDGRID_RUN_DIR": str(workdir / "run"),
            "SANDGRID_LOG_DIR": str(workdir / "log"),
            "SANDGRID_SENTINEL_DIR": str(workdir / "data"),
            "SANDGRID_SENTINEL_PORTS": " ".join(map(str, self.ports)),
            "SANDGRID_SENTINEL_MASTER": MASTER,
        }

    @property
    def sentinel_ports(self) -> list[int]:
        return self.ports[2:]

    def url(self, role: str = "api", db: int = 0) -> str:
        """The grid's ``sentinel://`` URL as ``sg-ROLE``."""
        pw = self.secrets[f"SG_REDIS_PW_{role.upper()}"]
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"sentinel://sg-{role}:{pw}@{hosts}/{db}?master={MASTER}"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(_SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sentinel.sh {' '.join(args)}: {done.stderr[-2000:]}")

    def start(self) -> None:
        """Start what is not running and wait until the sentinels agree (idempotent)."""
        self._run()

    def stop(self) -> None:
        self._run("stop")

    def admin(self, port: int) -> redis.Redis[str]:
        return redis.Redis(
            port=port,
            username="sg-admin",
            password=self.secrets["SG_REDIS_PW_ADMIN"],
            decode_responses=True,
            socket_timeout=2,
        )

    def primary_port(self) -> int | None:
        """Where the first sentinel that answers says the primary is."""
        for port in self.sentinel_ports:
            client = self.admin(port)
            try:
                addr = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
                return int(addr[1]) if addr else None
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def kill_primary(self) -> int:
        """SIGKILL the primary (a crash: no shutdown, no last AOF flush); its port."""
        port = self.primary_port()
        assert port is not None, "no primary to kill"
        pid = int((self.dir / "run" / f"redis-{port}.pid").read_text())
        os.killpg(pid, signal.SIGKILL)
        return port

    def wait_promoted(self, old: int, timeout: float = 60) -> float:
        """Until a sentinel names a primary other than ``old``; when (monotonic)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and port != old:
                return time.monotonic()
            time.sleep(0.05)
        raise TimeoutError(f"no replica promoted within {timeout} s")
