"""The ledger contract against ``RedisLedger``, the worker's view of the registry."""

from __future__ import annotations

import pytest
import redis

from sandgrid.wire.redis_ledger import RedisLedger
from tests.support.ledger_contract import LEASE_S, LedgerContract


class TestRedisLedger(LedgerContract):
    @pytest.fixture
    def ledger(self, redis_client: redis.Redis[str]) -> RedisLedger:
        return RedisLedger(redis_client, lease_ttl_s=LEASE_S)
