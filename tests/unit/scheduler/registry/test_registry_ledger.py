"""The ledger contract against ``SessionRegistry``'s ledger: the control plane's
registry holds the worker's ledger on the same client, and its own scripts change
none of the worker's operations."""

from __future__ import annotations

import pytest
import redis

from sandgrid.wire.redis_ledger import RedisLedger
from scheduler.registry.sessions import SessionRegistry
from tests.support.ledger_contract import LEASE_S, LedgerContract


class TestSessionRegistryLedger(LedgerContract):
    @pytest.fixture
    def ledger(self, redis_client: redis.Redis[str]) -> RedisLedger:
        return SessionRegistry(redis_client, lease_ttl_s=LEASE_S).ledger
