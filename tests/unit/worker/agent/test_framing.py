"""The agent frames replies with the very function the worker frames requests with."""

from __future__ import annotations

import pytest

from worker.agent import framing
from worker.agent.framing import compact_json


@pytest.mark.parametrize("text", ["plain", "é 😀", "\x01 \\u0041", "A" * 100_000])
def test_replies_are_framed_as_the_worker_frames_requests(text: str) -> None:
    obj = {"id": 1, "ok": True, "result": {"data_b64": text, "é": [text]}}
    assert framing.compact_json(obj) == compact_json(obj)
