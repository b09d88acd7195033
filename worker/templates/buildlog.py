"""A build's log as it comes: its tail in the template's record, each chunk in its stream (25.2)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sandgrid.templates import MAX_LOG_BYTES

__all__ = ["BuildLog"]

_FLUSH_S = 0.5


class BuildLog:
    """The build log's tail, written into the record at most every ``_FLUSH_S``, and each
    chunk appended to the build's event stream as it comes (``GET .../logs?follow=1``)."""

    def __init__(self, save: Callable[[str], None], stream: Callable[[str], None]) -> None:
        self.text = ""
        self._save = save
        self._stream = stream
        self._last = 0.0

    def __call__(self, chunk: str) -> None:
        self.text = (self.text + chunk)[-MAX_LOG_BYTES:]
        self._stream(chunk)
        if time.monotonic() - self._last >= _FLUSH_S:
            self._last = time.monotonic()
            self._save(self.text)
