"""An exec's captured output: kept up to the cap, decoded with replacement."""

from __future__ import annotations

from worker.agent.exec import Output


def test_output_keeps_cap_and_drains() -> None:
    out = Output("stdout", 10, 1, False)
    for _ in range(1000):
        out.feed(b"0123456789abcdef")
    assert bytes(out.data) == b"0123456789" and out.truncated
    exact = Output("stdout", 4, 1, False)
    exact.feed(b"abcd")
    assert not exact.truncated and exact.text() == "abcd"


def test_output_decodes_with_replacement() -> None:
    out = Output("stderr", 100, 1, False)
    out.feed("é".encode()[:1])
    assert out.text() == "\ufffd"
