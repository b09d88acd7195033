"""The template's body (25.2): ``from``, the step kinds, and the rules each field is held to."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandgrid.templates import (
    MAX_COPY_BYTES,
    MAX_STEPS,
    CopyStep,
    EnvStep,
    RunStep,
    TemplateSpec,
    WorkdirStep,
)


def test_the_body_takes_from_and_each_step_kind() -> None:
    spec = TemplateSpec.model_validate(
        {
            "name": "node-app",
            "from": "python",
            "steps": [
                {"run": "apt-get install -y nodejs"},
                {"copy": {"/etc/app.conf": "x = 1"}},
                {"env": {"APP": "1"}},
                {"workdir": "/srv"},
            ],
            "network": {"allow": ["deb.debian.org"]},
        }
    )
    assert spec.from_ == "python"
    assert [type(s) for s in spec.steps] == [RunStep, CopyStep, EnvStep, WorkdirStep]
    assert spec.quotas.timeout_s > 0 and spec.network is not None
    assert spec.model_dump(by_alias=True)["from"] == "python"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"from": "../x"}, "from"),
        ({"steps": []}, "steps"),
        ({"steps": [{"run": "true"}] * (MAX_STEPS + 1)}, "steps"),
        ({"steps": [{"copy": {"relative/path": "x"}}]}, "steps"),
        ({"steps": [{"copy": {"/a/../b": "x"}}]}, "steps"),
        ({"steps": [{"copy": {"/big": "x" * (MAX_COPY_BYTES + 1)}}]}, "steps"),
        ({"steps": [{"env": {"1BAD": "x"}}]}, "steps"),
        ({"steps": [{"workdir": "relative"}]}, "steps"),
        ({"steps": [{"nope": "x"}]}, "steps"),
        ({"quotas": {"memory_mb": 1}}, "quotas"),
    ],
)
def test_a_broken_rule_names_its_field(body: dict[str, object], field: str) -> None:
    full = {"name": "tpl", "from": "python", "steps": [{"run": "true"}], **body}
    with pytest.raises(ValidationError) as err:
        TemplateSpec.model_validate(full)
    assert err.value.errors()[0]["loc"][0] == field
