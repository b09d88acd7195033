"""API fixtures: the real app and Redis (db 15), a fake worker instead of Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from sandgrid.wire.settings import Settings
from tests.support.fakes import Grid, make_grid


@pytest.fixture
def grid(redis_client: redis.Redis[str], test_settings: Settings) -> Iterator[Grid]:
    yield from make_grid(redis_client, test_settings)


@pytest.fixture(autouse=True)
def _own_catalog_view() -> Iterator[None]:
    """Each test starts with the types file as its catalog (25.1): an API or a command a
    test built installs a view over its Redis, which must not outlive the test."""
    from sandgrid.wire import catalog

    catalog.install(catalog.CatalogView())
    yield
    catalog.install(catalog.CatalogView())
