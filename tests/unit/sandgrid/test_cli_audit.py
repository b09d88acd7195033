"""``sandgrid audit --since``: durations, ISO times, epoch seconds; a clear error otherwise."""

from __future__ import annotations

import pytest

from sandgrid.cli.audit import parse_since
from sandgrid.errors import InvalidInput


def test_since_forms() -> None:
    assert parse_since("15m", now=1000.0) == 100.0
    assert parse_since("2h", now=10_000.0) == 2800.0
    assert parse_since("1700000000") == 1_700_000_000.0
    assert parse_since("1970-01-02T00:00:00") == 86400.0


def test_bad_since_names_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_since("yesterday")
    assert err.value.context["field"] == "since"
