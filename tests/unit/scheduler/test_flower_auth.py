"""Flower's /metrics handler is wrapped with Flower's own authentication."""

from __future__ import annotations

from flower.views import monitor

from scheduler.flower import protect_metrics


def test_metrics_handler_requires_an_authenticated_user() -> None:
    original = monitor.Metrics.get
    try:
        protect_metrics()
        wrapped = monitor.Metrics.get
        protect_metrics()  # idempotent: wrapped once
        assert monitor.Metrics.get is wrapped
        assert wrapped is not original and wrapped.__wrapped__ is original  # type: ignore[attr-defined]
    finally:
        monitor.Metrics.get = original  # type: ignore[method-assign]
