"""Request fields are checked by type, a bool never passing for a number."""

from __future__ import annotations

import pytest

from worker.agent.errors import AgentError, need


def test_field_validation() -> None:
    with pytest.raises(AgentError):
        need({"timeout": True}, "timeout", (int, float))
    with pytest.raises(AgentError):
        need({}, "argv", list)
    assert need({"timeout": 1.5}, "timeout", (int, float)) == 1.5
