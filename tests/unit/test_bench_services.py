"""The benchmarks reach the shared Redis and MinIO with the generated credentials (23.19).

``bench/_services.py`` is loaded from its file (bench/ is not a package): with a
state directory holding ``secrets.env`` the shared Redis URL gets the admin user
and the grid processes the MinIO keys, never the permission to run on defaults;
without one (a machine not switched over) everything stays password-less and
only then is that permission given.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.deploy_state import ROOT, fake_state

URL = "redis://127.0.0.1:6379/13"


def _services() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_services", ROOT / "bench/_services.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SANDGRID_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("SANDGRID_REDIS_PORT", raising=False)
    for var in ("SANDGRID_MINIO__ACCESS_KEY", "SANDGRID_MINIO__SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_a_switched_over_machine_gives_the_generated_credentials(state: Path) -> None:
    made = fake_state(state)
    bench = _services()
    url = bench.shared_redis_url(URL)
    assert url == f"redis://sg-admin:{made['SG_REDIS_PW_ADMIN']}@127.0.0.1:6379/13"
    env = bench.grid_env(url)
    assert env == {
        "SANDGRID_MINIO__ACCESS_KEY": made["SG_MINIO_ACCESS_KEY"],
        "SANDGRID_MINIO__SECRET_KEY": made["SG_MINIO_SECRET_KEY"],
    }
    assert bench.minio_settings().secret_key == made["SG_MINIO_SECRET_KEY"]


def test_a_machine_not_switched_over_stays_password_less(state: Path) -> None:
    bench = _services()
    assert bench.shared_redis_url(URL) == URL
    assert bench.grid_env(URL) == {"SANDGRID_ALLOW_INSECURE_DEFAULTS": "1"}


def test_a_benchmarks_own_password_less_redis_is_allowed_on_defaults(state: Path) -> None:
    fake_state(state)
    bench = _services()
    own = "redis://127.0.0.1:6390/0"
    assert bench.shared_redis_url(own) == own
    assert bench.grid_env(own)["SANDGRID_ALLOW_INSECURE_DEFAULTS"] == "1"
