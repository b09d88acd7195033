"""``sandgrid templates build|show`` (25.2) and ``client.templates``: the file is the body, the
log is followed to the build's end, a failed build exits 1 naming its step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandgrid.cli import main
from sandgrid.client._templates import Templates, build_template, template_spec
from sandgrid.errors import InvalidInput
from sandgrid.templates import TemplateInfo

TOML = """
name = "node-app"
from = "python"
network = { allow = ["deb.debian.org"] }
[quotas]
memory_mb = 2048
[[steps]]
run = "apt-get install -y nodejs"
[[steps]]
copy = { "/etc/app.conf" = "port = 8080" }
"""


def _info(state: str, log: str = "", **kw: Any) -> TemplateInfo:
    return TemplateInfo(
        name="node-app", tenant="acme", base="python", build_id="ab" * 8, state=state, log=log, **kw
    )  # type: ignore[arg-type]


class _Client:
    """The SDK's client as the command uses it, answering a scripted build."""

    def __init__(self, answers: list[TemplateInfo]) -> None:
        self.answers = answers
        self.built: list[Any] = []
        self.templates = Templates(self)

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def build_template(self, definition: Any) -> TemplateInfo:
        self.built.append(template_spec(definition))
        return _info("building")

    def get_template(self, name: str) -> TemplateInfo:
        return self.answers.pop(0)


@pytest.fixture
def template(tmp_path: Path) -> Path:
    path = tmp_path / "template.toml"
    path.write_text(TOML)
    return path


def _run(monkeypatch: pytest.MonkeyPatch, client: _Client, *args: str) -> Any:
    import sandgrid.cli.templates
    import sandgrid.client

    monkeypatch.setattr(sandgrid.client, "Client", lambda *_, **__: client)
    monkeypatch.setattr(sandgrid.cli.templates, "_POLL_S", 0)
    return CliRunner().invoke(main, ["templates", *args])


def test_build_sends_the_file_and_follows_the_log_to_ready(
    monkeypatch: pytest.MonkeyPatch, template: Path
) -> None:
    client = _Client(
        [
            _info("building", "step 1\n"),
            _info("ready", "step 1\nstep 2\n", image="r/i:1", digest="sha256:" + "0" * 64),
        ]
    )
    out = _run(monkeypatch, client, "build", "-f", str(template))
    assert out.exit_code == 0, out.output
    assert out.stdout.count("step 1") == 1 and "step 2" in out.stdout
    assert "node-app: ready (r/i:1" in out.stdout
    [spec] = client.built
    assert spec.from_ == "python" and len(spec.steps) == 2 and spec.quotas.memory_mb == 2048


def test_a_failed_build_exits_1_naming_the_step(
    monkeypatch: pytest.MonkeyPatch, template: Path
) -> None:
    failed = _info("failed", "boom\n", error="steps[0]: exited with 3", failed_step=0, exit_code=3)
    out = _run(monkeypatch, _Client([failed]), "build", "-f", str(template))
    assert out.exit_code == 1
    assert "failed at step 0 (exit 3): steps[0]: exited with 3" in out.stderr


def test_the_sdk_checks_the_template_before_any_round_trip() -> None:
    call = build_template({"name": "node-app", "from": "python", "steps": [{"run": "true"}]})
    assert call.json is not None and call.json["from"] == "python"
    with pytest.raises(InvalidInput) as err:
        build_template({"name": "node-app", "from": "python", "steps": []})
    assert err.value.context["field"] == "steps"
