"""Object keys of the store, written once, and the id rules that keep them safe.

Every key starts with the tenant, so that a tenant's data is one prefix and no
key built for one tenant can name another tenant's object::

    t/<tenant>/blobs/<sha256>                     a blob: one file, or a pack of small files
    t/<tenant>/s/<session>/latest                 the pointer: newest snapshot + retained history
    t/<tenant>/s/<session>/snap/<seq>-<id>.json   a manifest
    t/<tenant>/s/<session>/record.json            the session's record (the control plane's)
    t/<tenant>/mem/<session>/<sha256>             a memory image's manifest (issue 24)
    t/<tenant>/memchunk/<sha256>                  a zstd'd piece of memory images (shared)
    t/<tenant>/memckpt/<session>/<name>           a checkpoint's memory image (24.3)
    t/<tenant>/audit/<yyyy-mm-dd>/<first-id>.jsonl  a segment of the audit trail (append-only)
    grid/types.json                               the catalog of sandbox types (no tenant's: 25.1)

Ids are checked here before any key is built: no ``/``, no ``..``, no empty or
odd characters, so a caller's string can never walk out of its prefix.
"""

from __future__ import annotations

import re

from sandgrid.errors import InvalidInput

__all__ = [
    "SHA256_RE",
    "SNAPSHOT_NAME_RE",
    "audit_day_of",
    "audit_prefix",
    "audit_segment_key",
    "blob_key",
    "blobs_prefix",
    "check_id",
    "check_snapshot_name",
    "manifest_key",
    "manifests_prefix",
    "memory_checkpoint_key",
    "memory_checkpoints_prefix",
    "memory_chunk_key",
    "memory_chunks_prefix",
    "memory_image_key",
    "memory_images_prefix",
    "memory_prefix",
    "parse_session_key",
    "pointer_key",
    "record_key",
    "record_owner",
    "session_prefix",
    "sessions_prefix",
    "snapshot_name",
    "types_record_key",
]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SNAPSHOT_NAME_RE = re.compile(r"^[0-9]{12}-[0-9a-f]{12}$")
"""``<seq, 12 digits>-<random id, 12 hex>``: sorts by sequence as a string."""
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_SUFFIX = ".json"
_RECORD = "record.json"


def check_id(field: str, value: object) -> str:
    """Return ``value`` if it is a safe tenant or session id.

    Raises:
        InvalidInput: not a string of 1-128 letters, digits, ``_ . -`` starting
            with a letter or digit, or containing ``..``.
    """
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        raise InvalidInput(
            f"{field} {value!r} must match {_ID_RE.pattern} and must not contain '..'",
            operation="snapshot",
            context={"field": field, "value": str(value)[:200]},
        )
    return value


def check_snapshot_name(value: object) -> str:
    """Return ``value`` if it is a snapshot name (``<seq>-<id>``).

    Raises:
        InvalidInput: anything else (a ``/``, ``..``, a key, a hash...).
    """
    if not isinstance(value, str) or not SNAPSHOT_NAME_RE.fullmatch(value):
        raise InvalidInput(
            f"snapshot {value!r} must match {SNAPSHOT_NAME_RE.pattern}",
            operation="snapshot",
            context={"field": "snapshot", "value": str(value)[:200]},
        )
    return value


def snapshot_name(seq: int, snapshot_id: str) -> str:
    return f"{seq:012d}-{snapshot_id}"


def _tenant(tenant: str) -> str:
    return f"t/{check_id('tenant', tenant)}/"


def blobs_prefix(tenant: str) -> str:
    return f"{_tenant(tenant)}blobs/"


def blob_key(tenant: str, sha256: str) -> str:
    if not SHA256_RE.fullmatch(sha256):
        raise InvalidInput(f"blob id {sha256!r} is not a sha256", operation="snapshot")
    return f"{blobs_prefix(tenant)}{sha256}"


def memory_images_prefix(tenant: str) -> str:
    """Every session's memory manifests of a tenant (the chunks' sweep reads them)."""
    return _tenant(tenant) + "mem/"


def memory_chunks_prefix(tenant: str) -> str:
    """The tenant's memory chunks, shared by its images (forks, repeated pauses)."""
    return _tenant(tenant) + "memchunk/"


def _memory_sha(what: str, sha256: str) -> str:
    """``sha256`` if it is one (a memory image's or chunk's name), else 422."""
    if not SHA256_RE.fullmatch(sha256):
        raise InvalidInput(f"{what} {sha256!r} is not a sha256", operation="memory")
    return sha256


def memory_chunk_key(tenant: str, sha256: str) -> str:
    """One chunk of memory images, named by the sha256 of its stored bytes."""
    return memory_chunks_prefix(tenant) + _memory_sha("memory chunk", sha256)


def memory_checkpoints_prefix(tenant: str, session_id: str) -> str:
    """A session's checkpoints with memory (24.3): each names one image of the session."""
    return f"{_tenant(tenant)}memckpt/{check_id('session_id', session_id)}/"


def memory_checkpoint_key(tenant: str, session_id: str, name: str) -> str:
    return f"{memory_checkpoints_prefix(tenant, session_id)}{check_id('checkpoint', name)}"


def memory_prefix(tenant: str, session_id: str) -> str:
    """A session's memory images (issue 24): beside its snapshots, apart from ``s/``."""
    return f"{_tenant(tenant)}mem/{check_id('session_id', session_id)}/"


def memory_image_key(tenant: str, session_id: str, sha256: str) -> str:
    """One memory image's manifest, named by the sha256 of its bytes."""
    return memory_prefix(tenant, session_id) + _memory_sha("memory image", sha256)


def sessions_prefix(tenant: str) -> str:
    return f"{_tenant(tenant)}s/"


def session_prefix(tenant: str, session_id: str) -> str:
    return f"{sessions_prefix(tenant)}{check_id('session_id', session_id)}/"


def pointer_key(tenant: str, session_id: str) -> str:
    return f"{session_prefix(tenant, session_id)}latest"


def record_key(tenant: str, session_id: str) -> str:
    return f"{session_prefix(tenant, session_id)}{_RECORD}"


def types_record_key() -> str:
    """The catalog's record: outside every tenant's prefix (``t/``), so no tenant key names it."""
    return "grid/types.json"


def record_owner(key: str) -> tuple[str, str] | None:
    """The (tenant, session) of a record key (any tenant's); None for any other key."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != "t" or parts[2] != "s" or parts[4] != _RECORD:
        return None
    ids = parts[1], parts[3]
    return ids if all(_ID_RE.fullmatch(i) and ".." not in i for i in ids) else None


def manifests_prefix(tenant: str, session_id: str) -> str:
    return f"{session_prefix(tenant, session_id)}snap/"


def manifest_key(tenant: str, session_id: str, name: str) -> str:
    return f"{manifests_prefix(tenant, session_id)}{check_snapshot_name(name)}{_MANIFEST_SUFFIX}"


def parse_session_key(tenant: str, key: str) -> tuple[str, str | None] | None:
    """Split a key under ``sessions_prefix(tenant)`` into (session, snapshot name).

    The name is None for the session's pointer; the result is None for a key
    that is neither (a stray object is never mistaken for a manifest).
    """
    prefix = sessions_prefix(tenant)
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    if len(parts) == 2 and parts[1] == "latest" and _ID_RE.fullmatch(parts[0]):
        return parts[0], None
    if len(parts) == 3 and parts[1] == "snap" and parts[2].endswith(_MANIFEST_SUFFIX):
        name = parts[2][: -len(_MANIFEST_SUFFIX)]
        if _ID_RE.fullmatch(parts[0]) and SNAPSHOT_NAME_RE.fullmatch(name):
            return parts[0], name
    return None


_AUDIT_DAY_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_AUDIT_SEGMENT_RE = re.compile(r"^[0-9]+-[0-9]+$")


def audit_prefix(tenant: str) -> str:
    return f"{_tenant(tenant)}audit/"


def audit_segment_key(tenant: str, day: str, first_id: str) -> str:
    """One immutable segment of a tenant's audit trail for one UTC day.

    Named by the stream id of its first record, so exporting the same records
    again (a crash between the export and the trim) writes the same key.
    """
    if not _AUDIT_DAY_RE.match(day) or not _AUDIT_SEGMENT_RE.match(first_id):
        raise InvalidInput(
            f"audit segment {day}/{first_id}: a day is YYYY-MM-DD, an id is <ms>-<seq>",
            context={"field": "segment", "rule": "YYYY-MM-DD and <ms>-<seq>"},
        )
    return f"{audit_prefix(tenant)}{day}/{first_id}.jsonl"


def audit_day_of(tenant: str, key: str) -> str | None:
    """The day of a segment key of ``tenant``; None for any other key."""
    rest = key.removeprefix(audit_prefix(tenant))
    day, _, name = rest.partition("/")
    if rest == key or not _AUDIT_DAY_RE.match(day) or not name.endswith(".jsonl"):
        return None
    return day
