"""Every queue name, task name and Redis key template, written once.

Queues:
    ``sbx.<type>``         interactive turns of a sandbox type (shared)
    ``sbx.<type>.batch``   batch jobs of a sandbox type (shared, lower priority)
    ``node.<name>``        the direct queue of one worker node

Redis keys (all under ``sg:``):
    ``sg:session:<id>``            hash: the session record (``SessionInfo`` JSON)
    ``sg:tenant:<tenant>:sessions`` set: the tenant's session ids
    ``sg:lease:<id>``              string: owner node, with a TTL (the lease)
    ``sg:turnlock:<id>``           string: the op that holds the session alone (close, fork,
                                   pause, restore, checkpoint), with a TTL
    ``sg:sturns:<id>``             sorted set: the session's turns in flight (turn id ->
                                   deadline), at most its ``max_parallel_turns``
    ``sg:swait:<id>``              sorted set: calls waiting for a turn slot of the session
                                   (ticket -> arrival), served in that order
    ``sg:sseen:<id>``              sorted set: when each waiting call last asked (ticket ->
                                   time), so a waiter whose API process died is dropped
    ``sg:turn:<turn_id>``          hash: state and attempt of one turn
    ``sg:node:<name>``             string: node heartbeat, with a TTL
    ``sg:tenant:<tenant>:turns``   sorted set: the tenant's turns in flight (turn id ->
                                   deadline), so a crashed API process cannot leak a slot
    ``sg:tokens``                  hash: sha256(token) -> tenant record JSON
    ``sg:types``                   hash: the catalog of sandbox types (name -> JSON; 25.1)
    ``sg:types:version``           string: the catalog's version counter (nodes watch it)
    ``sg:batch:<id>``              hash: batch record; ``sg:batch:<id>:done`` set of job ids
    ``sg:batch:<id>:jobs``         list: ``BatchJob`` JSON, in submission order
    ``sg:batch:<id>:results``      list: ``BatchResult`` JSON lines, in completion order
    ``sg:batch:<id>:runner``       string: the API process running the batch, with a TTL
    ``sg:tenant:<tenant>:batches`` sorted set: the tenant's batch ids by creation time
    ``sg:gc:<tenant>``             string, with a TTL: a node is collecting the tenant's snapshots
                                   (rate limit of snapshot garbage collection, grid-wide)
    ``sg:batchslots:<type>``       sorted set: batch turns in flight on a type (id -> deadline),
                                   so batches never take every worker thread of the grid
    ``sg:audit:<tenant>``          stream: the tenant's recent audit records (``scheduler.audit``)
    ``sg:audit:export``            string, with a TTL: an API process is exporting the audit
    ``sg:audit-net:<id>``          hash: the last egress attempt of the session moved into the
                                   audit trail (``id``) and its tenant (issue 23.14)
    ``sg:pty:<turn>:out``          stream: a terminal's output, then its exit (bounded, expiring)
    ``sg:pty:<turn>:in``           stream: a terminal's input, resizes and close (bounded, expiring)
    ``sg:turn:<turn_id>:events``   stream: a turn's output chunks and result (bounded, expiring)
    ``sg:turn:<turn_id>:cancel``   string, with a TTL: the turn was cancelled
    ``sg:egress:<id>``             stream: the session's egress attempts (``NetworkAttempt``
                                   JSON in field ``a``), bounded, expiring
    ``sg:egress:<id>:usage``       hash: the session's egress usage (``connections``, ``bytes``)
    ``sg:slots:<kind>:<scope>:<id>`` sorted set: open streams or terminals of a tenant or a
                                   session (slot id -> lease deadline; issue 23.7)
"""

from __future__ import annotations

__all__ = [
    "KEY_PREFIX",
    "TASK_BUILD",
    "TASK_CANCEL",
    "TASK_PING",
    "TASK_STAGE",
    "TASK_TURN",
    "audit_export_lock_key",
    "audit_key",
    "audit_key_pattern",
    "audit_network_cursor_key",
    "audit_tenant_from_key",
    "batch_done_key",
    "batch_jobs_key",
    "batch_key",
    "batch_queue",
    "batch_results_key",
    "batch_runner_key",
    "batch_slots_key",
    "egress_audit_key",
    "egress_usage_key",
    "gc_key",
    "gc_tenants_key",
    "idempotency_key",
    "lease_key",
    "node_from_key",
    "node_key",
    "node_key_pattern",
    "node_of_queue",
    "node_queue",
    "ports_usage_key",
    "pty_in_key",
    "pty_out_key",
    "reply_channel",
    "session_key",
    "session_seen_key",
    "session_turns_key",
    "session_waiting_key",
    "stream_slots_key",
    "template_build_session",
    "template_key",
    "tenant_batches_key",
    "tenant_sessions_key",
    "tenant_turns_key",
    "tokens_ack_key",
    "tokens_changed_channel",
    "tokens_key",
    "ttl_sessions_key",
    "turn_cancel_key",
    "turn_events_key",
    "turn_key",
    "turnlock_key",
    "type_queue",
    "types_key",
    "types_version_key",
]

KEY_PREFIX = "sg:"

TASK_TURN = "sandgrid.turn"
TASK_PING = "sandgrid.ping"
"""A trivial task every worker serves: the broker's own round trip, for benchmarks."""
TASK_CANCEL = "sandgrid.cancel"
TASK_BUILD = "sandgrid.template_build"
"""A template's build (25.2), sent to one node's direct queue."""
TASK_STAGE = "sandgrid.memory_stage"
"""Stage a paused session's memory image ahead on one node (24.1, ``worker.turns.memory_stage``)."""


def type_queue(sandbox_type: str) -> str:
    return f"sbx.{sandbox_type}"


def batch_queue(sandbox_type: str) -> str:
    return f"sbx.{sandbox_type}.batch"


def node_queue(node: str) -> str:
    return f"node.{node}"


def node_of_queue(queue: str) -> str | None:
    """The node whose direct queue this is, or None for a shared queue."""
    return queue[len("node.") :] if queue.startswith("node.") else None


def session_key(session_id: str) -> str:
    return f"{KEY_PREFIX}session:{session_id}"


def tenant_sessions_key(tenant: str) -> str:
    return f"{KEY_PREFIX}tenant:{tenant}:sessions"


def stream_slots_key(kind: str, scope: str, ident: str) -> str:
    """Open slots of ``kind`` (stream, terminal) of one tenant or session (``scope``)."""
    return f"{KEY_PREFIX}slots:{kind}:{scope}:{ident}"


def tenant_turns_key(tenant: str) -> str:
    return f"{KEY_PREFIX}tenant:{tenant}:turns"


def lease_key(session_id: str) -> str:
    return f"{KEY_PREFIX}lease:{session_id}"


def turnlock_key(session_id: str) -> str:
    return f"{KEY_PREFIX}turnlock:{session_id}"


def session_turns_key(session_id: str) -> str:
    return f"{KEY_PREFIX}sturns:{session_id}"


def session_waiting_key(session_id: str) -> str:
    return f"{KEY_PREFIX}swait:{session_id}"


def session_seen_key(session_id: str) -> str:
    return f"{KEY_PREFIX}sseen:{session_id}"


def turn_key(turn_id: str) -> str:
    return f"{KEY_PREFIX}turn:{turn_id}"


def reply_channel(reply_to: str) -> str:
    """The pub/sub channel of the results of the tasks sent with ``reply_to`` (one API
    thread's, issue 22.1): its consumer subscribes once, not once per task."""
    return f"{KEY_PREFIX}reply:{reply_to}"


def idempotency_key(turn_id: str) -> str:
    """The record of an exec's idempotency key: the turn id is derived from the key."""
    return f"{KEY_PREFIX}idem:{turn_id}"


def node_key(node: str) -> str:
    return f"{KEY_PREFIX}node:{node}"


def node_key_pattern() -> str:
    """SCAN pattern matching every node heartbeat key (health, listing live workers)."""
    return f"{KEY_PREFIX}node:*"


def node_from_key(key: str) -> str:
    """The node name of a heartbeat key returned by a SCAN of ``node_key_pattern``."""
    return key[len(f"{KEY_PREFIX}node:") :]


def tokens_key() -> str:
    return f"{KEY_PREFIX}tokens"


def types_key() -> str:
    """Hash: the catalog of sandbox types (name -> ``SandboxTypeSpec`` JSON; issue 25.1)."""
    return f"{KEY_PREFIX}types"


def types_version_key() -> str:
    """String: the catalog's version counter, moved by every change (nodes watch it)."""
    return f"{KEY_PREFIX}types:version"


# 23.16: a change of tokens (rotate, revoke, set) drops every API process's token cache.
def tokens_changed_channel() -> str:
    """Pub/sub channel on which a token change is announced (data: the change's id)."""
    return f"{KEY_PREFIX}tokens:changed"


def tokens_ack_key(change_id: str) -> str:
    """List each API process pushes to once it has dropped its cache for a change."""
    return f"{KEY_PREFIX}tokens:ack:{change_id}"


def batch_key(batch_id: str) -> str:
    return f"{KEY_PREFIX}batch:{batch_id}"


def batch_done_key(batch_id: str) -> str:
    return f"{KEY_PREFIX}batch:{batch_id}:done"


def batch_jobs_key(batch_id: str) -> str:
    return f"{KEY_PREFIX}batch:{batch_id}:jobs"


def batch_results_key(batch_id: str) -> str:
    return f"{KEY_PREFIX}batch:{batch_id}:results"


def batch_runner_key(batch_id: str) -> str:
    return f"{KEY_PREFIX}batch:{batch_id}:runner"


def tenant_batches_key(tenant: str) -> str:
    return f"{KEY_PREFIX}tenant:{tenant}:batches"


def batch_slots_key(sandbox_type: str) -> str:
    return f"{KEY_PREFIX}batchslots:{sandbox_type}"


def gc_tenants_key() -> str:
    """Sorted set: tenant -> when a worker last served it (whose snapshots to collect)."""
    return f"{KEY_PREFIX}gc-tenants"


def gc_key(tenant: str) -> str:
    return f"{KEY_PREFIX}gc:{tenant}"


def audit_key(tenant: str) -> str:
    return f"{KEY_PREFIX}audit:{tenant}"


def audit_key_pattern() -> str:
    return f"{KEY_PREFIX}audit:*"


def audit_tenant_from_key(key: str) -> str:
    return key.removeprefix(f"{KEY_PREFIX}audit:")


def audit_export_lock_key() -> str:
    return f"{KEY_PREFIX}audit-export"


def audit_network_cursor_key(session_id: str) -> str:
    """Hash: how far the session's egress attempts were collected into the audit (23.14)."""
    return f"{KEY_PREFIX}audit-net:{session_id}"


def pty_out_key(turn_id: str) -> str:
    """Stream: the output of the terminal turn ``turn_id``; its last entry is the exit."""
    return f"{KEY_PREFIX}pty:{turn_id}:out"


def pty_in_key(turn_id: str) -> str:
    """Stream: what the client sends to the terminal turn ``turn_id``."""
    return f"{KEY_PREFIX}pty:{turn_id}:in"


def ttl_sessions_key() -> str:
    """Set: the sessions with a TTL (idle timeout or lifetime) that the sweeper watches."""
    return f"{KEY_PREFIX}sessions:ttl"


def turn_events_key(turn_id: str) -> str:
    """Redis Stream of one turn's events (``sandgrid.wire.turnstream``)."""
    return f"{KEY_PREFIX}turn:{turn_id}:events"


def turn_cancel_key(turn_id: str) -> str:
    """Set when a turn is cancelled: a worker that has not started it answers cancelled."""
    return f"{KEY_PREFIX}turn:{turn_id}:cancel"


def egress_audit_key(session_id: str) -> str:
    return f"{KEY_PREFIX}egress:{session_id}"


def egress_usage_key(session_id: str) -> str:
    return f"{KEY_PREFIX}egress:{session_id}:usage"


def ports_usage_key(session_id: str) -> str:
    """Issue 21.1: a session's port connections and bytes so far (a hash), every node's."""
    return f"{KEY_PREFIX}ports:{session_id}:usage"


# ---- 25.2: templates ----------------------------------------------------------------
def template_key(name: str) -> str:
    """String: the template ``name`` (``TemplateInfo`` JSON, its tenant in it): its state
    and build log. One key per name, all tenants: a type's name is the grid's (its queue)."""
    return f"{KEY_PREFIX}template:{name}"


def template_build_session(build_id: str) -> str:
    """The pseudo-session a build's egress is booked under (its policy, attempts, usage)."""
    return f"build-{build_id}"
