"""Session records in the object store: what a registry that lost everything re-learns.

Redis holds the live registry; if it loses its data (no AOF, a disk lost, a
flush), every session would be gone although its workspace is safe in the
store. So each session's record is kept beside its snapshots
(``keys.record_key``: ``t/<tenant>/s/<session>/record.json``), written when
the session is created and marked closed when it is closed: what it was made
with (tenant, type, quotas, env, snapshot policy, labels, created_at,
forked_from). The latest snapshot is not copied there, since every snapshot
would cost a second write: the session's pointer (``t/.../latest``, written by
the worker, ``worker.snapshots.pointer``) names it, and ``latest_snapshot``
reads it from there.

Only the control plane reads and writes records; a record is never trusted
across tenants: its key is under the tenant's prefix, and its body must name
the same tenant and session.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sandgrid.errors import InvalidInput
from sandgrid.models import SessionInfo
from sandgrid.wire.objects import ObjectStore, keys

__all__ = ["RECORD_FIELDS", "SessionRecord", "SessionRecords"]

log = logging.getLogger(__name__)

#: The fields of ``SessionInfo`` a record keeps: what the session was made with.
RECORD_FIELDS = frozenset(
    {
        "id",
        "tenant",
        "type",
        "quotas",
        "env",
        "snapshot_policy",
        "labels",
        "network",
        "created_at",
        "last_used",
        "forked_from",
        "port_url_epochs",  # a revocation survives a registry that lost its data
    }
)
#: The pointer formats (``worker.snapshots.pointer``: ``POINTER_VERSION``,
#: ``CARRYING_VERSION``, which carries its latest snapshot, and ``CHAIN_VERSION``,
#: which carries a chain of small ones) read here.
_POINTER_VERSIONS = (2, 3, 4)
_MAX_POINTER_BYTES = 2 << 20


class SessionRecord(BaseModel):
    """The stored form of a session's record (version 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    closed: bool = False
    session: SessionInfo


class SessionRecords:
    """Session records over an ``ObjectStore`` (see the module doc).

    Args:
        objects: the store the workers keep snapshots in.
    """

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    def save(self, info: SessionInfo, *, closed: bool = False) -> None:
        """Write the record of ``info`` (replacing the one there).

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        session = SessionInfo.model_validate(info.model_dump(include=set(RECORD_FIELDS)))
        record = SessionRecord(closed=closed, session=session)
        key = keys.record_key(info.tenant, info.id)
        self.objects.put(key, record.model_dump_json().encode())

    def close(self, tenant: str, session_id: str) -> None:
        """Mark the record closed, so that a lost registry never brings the session
        back; a session without a record (made before records) is left alone.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        record = self.load(tenant, session_id)
        if record is not None and not record.closed:
            self.save(record.session, closed=True)

    def load(self, tenant: str, session_id: str) -> SessionRecord | None:
        """The record of ``tenant``'s session, None if there is none (or it is not
        readable, or not that tenant's: such a record is never used).

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        try:
            stored = self.objects.get(keys.record_key(tenant, session_id))
        except (KeyError, InvalidInput):  # no record, or an id that names none
            return None
        try:
            record = SessionRecord.model_validate_json(stored)
        except ValidationError as exc:
            log.warning("record of session %s/%s unreadable: %s", tenant, session_id, exc)
            return None
        if record.session.tenant != tenant or record.session.id != session_id:
            log.warning("record of session %s/%s names another session", tenant, session_id)
            return None
        return record

    def live(self, tenant: str, session_id: str) -> SessionInfo | None:
        """The session as a registry that lost it should know it again: its record
        with the latest snapshot, ``idle`` (``new`` without a snapshot). None when
        there is no record or it says closed.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        record = self.load(tenant, session_id)
        if record is None or record.closed:
            return None
        snapshot = self.latest_snapshot(tenant, session_id)
        return record.session.model_copy(
            update={
                "snapshot": snapshot,
                "state": "idle" if snapshot else "new",
                "last_used": datetime.now(UTC),
            }
        )

    def scan(self) -> Iterator[tuple[str, str]]:
        """(tenant, session) of every record in the store, all tenants.

        This lists every key under ``t/`` (the store has no directory listing):
        an administrator's operation, never one of a request.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        for key in sorted(self.objects.list("t/")):
            owner = keys.record_owner(key)
            if owner is not None:
                yield owner

    def latest_snapshot(self, tenant: str, session_id: str) -> str | None:
        """The newest snapshot the session's pointer names; None without one (or with
        a pointer that cannot be read: the worker reports that on restore).

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        try:
            stored = self.objects.get(keys.pointer_key(tenant, session_id))
        except KeyError:
            return None
        try:
            doc = json.loads(_decode(stored))
            if doc["v"] not in _POINTER_VERSIONS:
                raise ValueError(f"pointer version {doc['v']!r}")
            return keys.check_snapshot_name(doc["history"][-1][0])
        except (ValueError, TypeError, KeyError, IndexError, InvalidInput) as exc:
            log.warning("pointer of session %s/%s unreadable: %s", tenant, session_id, exc)
            return None


def _decode(stored: bytes) -> bytes:
    """A pointer's bytes from their stored form (``worker.snapshots.format.blobs``:
    a tag byte, ``R`` raw or ``Z`` zlib), at most ``_MAX_POINTER_BYTES``.

    Raises:
        ValueError: another tag, a corrupt stream, or too large.
    """
    tag, body = stored[:1], stored[1:]
    if tag == b"R":
        data = body
    elif tag == b"Z":
        try:
            data = zlib.decompressobj().decompress(body, _MAX_POINTER_BYTES + 1)
        except zlib.error as exc:
            raise ValueError(f"corrupt pointer: {exc}") from None
    else:
        raise ValueError(f"unknown pointer encoding {tag!r}")
    if len(data) > _MAX_POINTER_BYTES:
        raise ValueError("pointer too large")
    return data
