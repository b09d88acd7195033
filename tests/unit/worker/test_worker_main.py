"""The worker process's own setup."""

from __future__ import annotations

import pytest

from worker.main import limit_malloc_arenas


def test_malloc_arenas_are_capped_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas() is True  # glibc (Debian)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False  # glibc read it at start: left alone
