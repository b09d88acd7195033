"""A session being restored has its lease renewed like a resident one (24.2).

A memory image of a fork can take longer to fetch and restore than the lease's
TTL on a loaded node: without this, the heartbeat let the lease lapse and then
dropped the sandbox it had just restored ("lease lost").
"""

from __future__ import annotations

from worker.sessions.table import SessionTable


def test_a_session_being_restored_is_among_the_leases_to_renew() -> None:
    table = SessionTable()
    assert table.ids() == []
    with table.restoring("s-1"):
        assert table.ids() == ["s-1"]
        assert table.get("s-1") is None  # not resident: nothing to drop if it is lost
    assert table.ids() == []
