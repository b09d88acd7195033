"""The ledger contract against ``SessionRegistry``: the control plane's registry is
a ledger too, and its own scripts change none of the worker's operations."""

from __future__ import annotations

import pytest
import redis

from scheduler.registry.sessions import SessionRegistry
from tests.support.ledger_contract import LEASE_S, LedgerContract


class TestSessionRegistryLedger(LedgerContract):
    @pytest.fixture
    def ledger(self, redis_client: redis.Redis[str]) -> SessionRegistry:
        return SessionRegistry(redis_client, lease_ttl_s=LEASE_S)
