"""When a session's workspace is saved, forked, forgotten and collected.

The executor, the node and the reaper ask this one object, so that the
snapshot policy of a session is decided in one place:

- ``after_turn`` (default): after every turn that may have changed the
  workspace, before the turn reports. The next turn can run on any worker, and
  a turn whose worker dies is run again from the snapshot taken before it.
- ``on_idle``: only when the session's sandbox is released (idle past
  ``SANDGRID_WORKER__IDLE_TTL_S``, or the node drains). Turns are faster; a
  worker lost in between loses the changes since the last release.
- ``never``: the workspace lives only in its sandbox; when the sandbox goes
  (idle, drain, worker loss) the session starts again from its last snapshot
  (its fork's, if it was forked) or from an empty workspace.

The registry's ``unsaved`` flag says when a session has changes that no
snapshot holds; the scheduler then refuses to run a turn again after a worker
loss, since the snapshot it would start from is not the one before that turn.

A snapshot that fails after a mutating turn (the store is down) does not turn
the turn into an error: it ran, so the caller gets its result, marked
``saved: false`` with the store's error (``unsaved_result``); an error would
hide the output of a command that did run, and invite the caller to run it
again. The session's record says ``unsaved`` (so a worker loss does not re-run
a turn on a snapshot older than the workspace), it stays on this node, dirty,
and the next snapshot that succeeds saves everything and clears the flag.

Turns of a session overlap (``worker.sessions.gate``). A snapshot is taken
after each mutating turn all the same, one at a time (``LocalSession.saving``),
and holds every turn that ended before it began and whatever the turns still
running had written by then (docs/reliability.md: what a snapshot taken while
turns overlap contains). The dirty flag is cleared when a snapshot begins and
set again by each mutating turn as it ends, so a turn that ends during a
snapshot takes the next one. Only a turn that ran alone takes the snapshot's
scan with its exec; when turns overlap, the snapshot scans when it is taken.

Closing a session deletes its snapshots (``forget``): the manifests and
pointer at once, the blobs when ``gc`` finds nothing refers to them any more (a
fork shares them). Collection (``collect_due``, from the reaper) runs for each
tenant served recently anywhere in the grid (a sorted set in the registry, so
a restarted node forgets nothing), at most every
``SANDGRID_WORKER__SNAPSHOTS__GC_INTERVAL_S`` per tenant across the grid (a
Redis key), and also deletes the snapshots of sessions whose record says
closed: a close that no worker handled is not leaked.
"""

from __future__ import annotations

import logging
import threading
import time

from sandgrid.errors import SandgridError, SnapshotError
from sandgrid.models import CodeResult, ExecResult, SaveError
from sandgrid.ops.files import DeleteResult, TarUploadResult, WriteResult
from sandgrid.ops.session import ForkOp, ForkResult
from sandgrid.ops.terminal import PtyResult
from sandgrid.wire.jobs import TurnJob, TurnResult
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.settings import SnapshotSettings
from worker import metrics
from worker.sandboxes import Sandbox
from worker.sessions.pool_protocol import BackendFor
from worker.sessions.table import LocalSession
from worker.snapshots import GcReport, Manifest, SnapshotStore, restore_sandbox, snapshot_sandbox
from worker.snapshots.checkpoints import checkpoint_id, drop_all, owner_of
from worker.snapshots.memory import MemoryStore
from worker.snapshots.store import DEFAULT_ROOTS

__all__ = ["Persistence", "unsaved_result"]

log = logging.getLogger(__name__)

#: The results of the ops that change the workspace (``SandboxHandler.mutates``):
#: each says whether the workspace was saved after it.
_SAVED = (ExecResult, CodeResult, WriteResult, DeleteResult, TarUploadResult, PtyResult)
_NOTE_EVERY_S = 60.0


class Persistence:
    """The snapshot policy of one node (see the module doc).

    Args:
        ledger: the session ledger (records, collection notes and claims).
        store: the snapshot store.
        backend_for: the backend of a sandbox type (it reads and writes workspaces).
        settings: the snapshot settings (collection grace and interval).
    """

    def __init__(
        self,
        ledger: SessionLedger,
        store: SnapshotStore,
        backend_for: BackendFor,
        settings: SnapshotSettings,
    ) -> None:
        self.ledger = ledger
        self.store = store
        self.backend_for = backend_for
        self.settings = settings
        self._lock = threading.Lock()
        self._noted: dict[str, float] = {}

    # ---- the workspace ----------------------------------------------------------------

    def restore(self, sbx: Sandbox, tenant: str, session_id: str, ref: str) -> Manifest:
        """Restore snapshot ``ref`` into ``sbx``; the manifest restored."""
        files = self.backend_for(sbx.sandbox_type).files
        with metrics.SNAPSHOT_SECONDS.labels(direction="restore").time():
            manifest = restore_sandbox(files, sbx, self.store, tenant, session_id, ref)
        metrics.SNAPSHOT_BYTES.labels(direction="restore").inc(sum(manifest.blobs.values()))
        return manifest

    def _snapshot(self, local: LocalSession) -> tuple[str, Manifest | None] | None:
        """Snapshot the session; ``(ref, manifest)``, or None when nothing changed."""
        files = self.backend_for(local.sandbox_type).files
        with metrics.SNAPSHOT_SECONDS.labels(direction="save").time():
            ref = snapshot_sandbox(
                files, local.sandbox, self.store, local.tenant, local.session_id, local.manifest
            )
        if ref is None:
            return None
        if log.isEnabledFor(logging.DEBUG):  # the phases joined only when they are logged
            phases = " ".join(f"{k}={v:.1f}" for k, v in ref.stats.items() if k.endswith("_ms"))
            log.debug("snapshot of %s: %s", local.session_id, phases)
        if ref.manifest is not None:
            metrics.SNAPSHOT_BYTES.labels(direction="save").inc(sum(ref.manifest.blobs.values()))
        return ref.name, ref.manifest

    # ---- saving ---------------------------------------------------------------------

    def save(self, local: LocalSession) -> None:
        """Save the session's workspace if it changed since the last snapshot.

        Raises:
            SnapshotError / InfrastructureError / InvalidInput: the snapshot
                failed; the session stays dirty and usable, the next one retries.
        """
        local.dirty = False  # a turn that ends from now on marks it again (``ended``)
        try:
            ref = self._snapshot(local)
        except SandgridError:
            local.dirty = True
            raise
        except Exception as exc:
            local.dirty = True
            raise SnapshotError(f"snapshot failed: {exc}", operation="snapshot") from exc
        if ref is not None:
            local.snapshot, local.manifest = ref
        self.touch(local.tenant)

    def before_turn(
        self, local: LocalSession, kind: str, *, mutates: bool, alone: bool = True
    ) -> None:
        """Mark the workspace changed before an op that ``mutates`` it runs (its
        handler says so): one that fails halfway may still have changed files. An
        exec that a snapshot follows scans in the same request
        (``Sandbox.scan_after_exec``) when no other turn of the session runs
        (``alone``)."""
        if mutates:
            local.dirty = True
        if kind == "exec" and local.policy == "after_turn" and alone:
            local.sandbox.scan_after_exec = DEFAULT_ROOTS  # scanned with the exec

    def ended(self, local: LocalSession, *, mutates: bool) -> None:
        """Mark the workspace changed again as a mutating op ends: a snapshot that
        began while it ran cleared the flag but may not hold all of its changes."""
        if mutates:
            local.dirty = True

    def after_turn(self, local: LocalSession, *, mutates: bool, solo: bool = True) -> None:
        """Snapshot after a turn as the session's policy says (under ``local.saving``).

        A turn that changed nothing still saves what an earlier failed snapshot
        left behind, but its own answer does not depend on that. A turn that did
        not run alone (``solo``) scans afresh: a scan taken with an exec may
        predate the other turns' changes.

        Raises:
            SandgridError: the snapshot after a mutating turn failed.
        """
        if not solo:
            local.sandbox.scan_ready = None
        if local.policy != "after_turn" or not local.dirty:
            return
        try:
            self.save(local)
        except SandgridError as exc:
            if mutates:
                raise
            log.warning("session %s: pending snapshot failed again: %s", local.session_id, exc)

    def on_release(self, local: LocalSession) -> None:
        """Save before the sandbox goes, unless the policy is ``never``, nothing
        changed, or the session was closed (its snapshots are being deleted).

        Raises:
            SandgridError: the snapshot failed (the caller decides whether to keep
                the sandbox).
        """
        if local.policy == "never" or not local.dirty:
            return
        info = self.ledger.get_any(local.session_id)
        if info is None or info.state == "closed":
            return
        self.save(local)
        self.ledger.update(local.session_id, snapshot=local.snapshot, unsaved=False)

    # ---- fork and close ---------------------------------------------------------------

    def fork(self, job: TurnJob) -> ForkResult:
        """Copy the latest snapshot of ``job.op.source`` into the new session ``job.session``.

        Both are the same tenant's: the API checked, and the store's keys are per
        tenant, so a job naming another tenant's session finds nothing.
        """
        op, info = job.op, job.session
        assert isinstance(op, ForkOp)
        source = checkpoint_id(op.source, op.checkpoint) if op.checkpoint else op.source
        ref = self.store.fork(info.tenant, source, info.id)
        self.ledger.update(info.id, snapshot=ref.name, last_turn=job.turn_id)
        self.touch(info.tenant)
        return ForkResult(snapshot=ref.name, forked_from=op.source)

    def forget(self, tenant: str, session_id: str) -> int:
        """Delete a closed session's snapshots (blobs are left to ``gc``); how many.

        A failure is logged, not raised: nobody waits for a close, and the next
        collection of the tenant deletes what is left.
        """
        self.touch(tenant)
        try:
            deleted: int = self.store.delete_session(tenant, session_id)
            deleted += drop_all(self.store, tenant, session_id)  # its checkpoints
            deleted += MemoryStore(self.store.objects, max_bytes=0).drop(tenant, session_id)
        except SandgridError as exc:
            log.warning("session %s: snapshots not deleted at close: %s", session_id, exc)
            return 0
        return deleted

    # ---- collection -------------------------------------------------------------------

    def touch(self, tenant: str) -> None:
        """Note that ``tenant`` was served: its snapshots will be collected. The note
        is in the registry (at most one write a minute per tenant from this node),
        so any node collects, also after this one restarts."""
        now = time.monotonic()
        with self._lock:
            if now - self._noted.get(tenant, -_NOTE_EVERY_S) < _NOTE_EVERY_S:
                return
            self._noted[tenant] = now
        try:
            self.ledger.note_gc_tenant(tenant)
        except Exception as exc:  # a lost note delays a collection, never a turn
            with self._lock:
                self._noted.pop(tenant, None)
            log.warning("could not note tenant %s for collection: %s", tenant, exc)

    def collect_due(self) -> int:
        """Collect every tenant whose turn has come (the reaper calls this); how many.

        A tenant is collected while it was served within twice the GC grace
        period plus an interval (long enough for the blobs of its last closed
        session to age past the grace), by one node per interval.
        """
        snaps = self.settings
        horizon = 2 * snaps.gc_grace_s + snaps.gc_interval_s
        done = 0
        for tenant in self.ledger.gc_tenants(time.time() - horizon):
            if not self.ledger.claim_gc(tenant, snaps.gc_interval_s):
                continue  # collected in this interval already, here or by another node
            try:
                self.collect(tenant)
                done += 1
            except SandgridError as exc:
                log.warning("snapshot collection of tenant %s failed: %s", tenant, exc)
        return done

    def collect(self, tenant: str) -> GcReport:
        """Delete the snapshots of the tenant's closed sessions, then its unreferenced blobs.

        Only sessions whose record says ``closed`` are deleted, never those
        without a record: a bucket may be shared by grids with other registries.
        """
        store, ledger = self.store, self.ledger
        closed = 0
        for session_id in store.sessions(tenant):
            info = ledger.get_any(owner_of(session_id))  # a checkpoint goes with its session
            if info is not None and info.state == "closed" and info.tenant == tenant:
                store.delete_session(tenant, session_id)
                closed += 1
        report: GcReport = store.gc(tenant)
        log.info(
            "snapshots of tenant %s collected: %d closed sessions, %d manifests, %d blobs deleted",
            tenant,
            closed,
            report.manifests_deleted,
            report.blobs_deleted,
        )
        return report


def unsaved_result(exc: SandgridError, result: TurnResult) -> TurnResult:
    """The result of a turn that ran but whose workspace could not be saved.

    The op's own result, marked ``saved: false`` with the store's error (code and
    message): the caller sees the output of a command that did run, so it has no
    reason to run it again. (Only a mutating op's snapshot failure reaches here,
    and each of their results has the two fields.)
    """
    if not isinstance(result, _SAVED):
        return result
    error = SaveError(code=str(exc.code), message=exc.message)
    return result.model_copy(update={"saved": False, "saved_error": error})
