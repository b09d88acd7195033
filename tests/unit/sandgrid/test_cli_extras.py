"""23.20: a grid command run without its extra says which extra to install.

``pip install sandgrid`` ships ``scheduler`` and ``worker`` (so ``sandgrid --help``
lists ``serve``, ``tenants``, ``admin``, ``worker``) but not uvicorn, redis,
celery or docker: each must then answer ``pip install 'sandgrid[EXTRA]'`` and
exit 1, never a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandgrid.cli import main
from sandgrid.cli.helpers import EXTRA_OF_PACKAGE

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["serve"], "uvicorn", "server"),
        (["tenants", "ls"], "redis", "server"),
        (["tenants", "add", "acme"], "redis", "server"),
        (["admin", "rebuild"], "redis", "server"),
        (["worker", "--types", "python"], "worker.main", "worker"),
    ],
)
def test_a_missing_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], blocked: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # `import blocked` now fails
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == 1, out.output
    assert f"pip install 'sandgrid[{extra}]'" in out.stderr
    assert f"`sandgrid {argv[0]}` needs the {extra!r} extra ({blocked}" in out.stderr
    assert "Traceback" not in out.output
    assert isinstance(out.exception, SystemExit)


def test_a_plugin_that_cannot_load_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "worker.cli", None)
    out = CliRunner().invoke(main, ["worker", "--types", "python"])
    assert out.exit_code == 1 and "pip install 'sandgrid[worker]'" in out.stderr


def test_a_missing_module_of_a_builtin_command_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sandgrid.client

    def broken(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'nothing_of_ours'", name="nothing_of_ours")

    monkeypatch.setattr(sandgrid.client, "Client", broken)
    out = CliRunner().invoke(main, ["sessions", "ls"])
    assert isinstance(out.exception, ModuleNotFoundError)


def test_the_extras_named_are_pyprojects() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert set(EXTRA_OF_PACKAGE.values()) <= set(project["optional-dependencies"])
    plugins = project["entry-points"]["sandgrid.commands"]
    assert {v.partition(".")[0] for v in plugins.values()} <= set(EXTRA_OF_PACKAGE)


# As after `pip install sandgrid`: the server and worker libraries cannot be imported.
SDK_ONLY = """
import sys
for blocked in ("uvicorn", "fastapi", "redis", "celery", "kombu", "docker", "minio", "flower"):
    sys.modules[blocked] = None
from sandgrid.cli import main
main()
"""


def _sdk_only(*argv: str) -> subprocess.CompletedProcess[str]:
    """``sandgrid ARGV`` in a process where only the SDK's dependencies import."""
    command = [sys.executable, "-c", SDK_ONLY, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.parametrize(
    ("argv", "extra"),
    [(["serve"], "server"), (["tenants", "ls"], "server"), (["worker"], "worker")],
)
def test_as_installed_without_extras(argv: list[str], extra: str) -> None:
    out = _sdk_only(*argv)
    assert out.returncode == 1, out.stderr
    assert f"pip install 'sandgrid[{extra}]'" in out.stderr
    assert "Traceback" not in out.stderr
    listed = _sdk_only("--help")
    assert listed.returncode == 0 and argv[0] in listed.stdout
