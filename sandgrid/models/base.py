"""What every wire model builds on: ``WireModel``, the wire's limits and its checked fields.

The limits are named constants (the API, the SDK and the worker check the same
numbers); a checked field (``WorkspacePath``, ``EnvVars``, ``LabelMap``) says
in its error which field broke which rule.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "CHECKPOINT_NAME_PATTERN",
    "DEFAULT_OUTPUT_CAP",
    "IDEMPOTENCY_HEADER",
    "LABEL_KEY_PATTERN",
    "MAX_ENV_BYTES",
    "MAX_ENV_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_LABELS",
    "MAX_LABEL_VALUE",
    "MAX_NETWORK_BYTES",
    "MAX_NETWORK_ENTRIES",
    "MAX_RECORD_BYTES",
    "MAX_SOURCE_BYTES",
    "MAX_TTL_S",
    "NEXT_OFFSET_HEADER",
    "WIRE_VERSION",
    "WORKSPACE",
    "EmptyBody",
    "EnvVars",
    "IdleAction",
    "LabelMap",
    "SandboxTypeName",
    "SessionId",
    "SessionState",
    "SnapshotPolicy",
    "WireModel",
    "WorkspacePath",
    "env_bytes",
    "workspace_path",
]

WIRE_VERSION = 1
WORKSPACE = "/workspace"
#: The request header of an exec's idempotency key (the API and the SDK agree on it).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Header of ``GET /v1/batches/{id}/results``: the offset after the lines returned.
NEXT_OFFSET_HEADER = "X-Sandgrid-Next-Offset"
DEFAULT_OUTPUT_CAP = 1 << 20  # 1 MiB per stream
MAX_FILE_BYTES = 16 << 20  # one file through the JSON API
MAX_SOURCE_BYTES = 1 << 20  # command / python source / stdin
MAX_ENV_ENTRIES = 128
MAX_ENV_BYTES = 32 << 10
"""The bytes of every ``NAME=VALUE`` of an env, together (UTF-8): 32 KiB."""
MAX_NETWORK_ENTRIES = 256
MAX_NETWORK_BYTES = 32 << 10
"""A network policy as JSON: 32 KiB."""
MAX_LABELS = 64
MAX_LABEL_VALUE = 256
"""The longest label value, in characters (no control characters)."""
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$"
"""A label key: 1-63 letters, digits, ``.``, ``_``, ``-`` or ``/``, alphanumeric at both ends."""
MAX_RECORD_BYTES = 64 << 10
"""A session's record as the caller sets it (``SessionCreate`` but ``files``), as JSON: 64 KiB.

The record is in every ``GET /v1/sessions`` and in every turn's message.
"""

SandboxTypeName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")]
SessionId = Annotated[str, Field(pattern=r"^s-[A-Za-z0-9_-]{16,64}$")]
SnapshotPolicy = Literal["after_turn", "on_idle", "never"]
IdleAction = Literal["release", "memory"]
"""What the reaper does with an idle session (issue 24): release it, or pause it with memory."""
SessionState = Literal["new", "live", "idle", "busy", "closed", "lost", "expired"]
"""``expired``: closed by its TTL (``idle_timeout_s``, ``max_lifetime_s``); shown by the API."""
CHECKPOINT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
"""A checkpoint's name: 1-48 letters, digits, ``_`` or ``-``, starting alphanumeric."""
MAX_TTL_S = 30 * 86400
"""The longest idle timeout or lifetime a session may ask for: 30 days."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class WireModel(BaseModel):
    """Base of every model that crosses a wire: frozen, no unknown fields.

    A validation error's text never quotes the input (``hide_input_in_errors``):
    a logged traceback of a bad reply would carry a tenant's output (issue 23,
    item 5). ``errors()`` still names each field and rule.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    v: int = WIRE_VERSION


def workspace_path(raw: str) -> str:
    """Normalise a path inside ``/workspace`` to a relative POSIX path.

    Raises:
        ValueError: the path is empty, has a NUL byte, or leaves the workspace
            (``..``, or an absolute path that is not under ``/workspace``).
    """
    if not raw or "\x00" in raw:
        raise ValueError(f"path {raw!r} must be non-empty and contain no NUL byte")
    if raw.startswith("/"):
        if raw != WORKSPACE and not raw.startswith(WORKSPACE + "/"):
            raise ValueError(
                f"path {raw!r} leaves the workspace: absolute paths must be under /workspace"
            )
        raw = raw[len(WORKSPACE) :].lstrip("/") or "."
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"path {raw!r} leaves the workspace through '..'")
    return norm


WorkspacePath = Annotated[str, AfterValidator(workspace_path)]


def env_bytes(env: dict[str, str]) -> int:
    """The size of an env as a process gets it: every ``NAME=VALUE``, in UTF-8 bytes."""
    return sum(len(k.encode()) + 1 + len(v.encode()) for k, v in env.items())


def _env(v: dict[str, str]) -> dict[str, str]:
    """An env's entries, names and size within the limits (``MAX_ENV_*``), or why not."""
    if len(v) > MAX_ENV_ENTRIES:
        raise ValueError(f"env has {len(v)} entries; at most {MAX_ENV_ENTRIES} are allowed")
    for k, val in v.items():
        if not _ENV_NAME.fullmatch(k):
            raise ValueError(f"env name {k!r} must match {_ENV_NAME.pattern}")
        if "\x00" in val:
            raise ValueError(f"env value of {k!r} must not contain a NUL byte")
    size = env_bytes(v)
    if size > MAX_ENV_BYTES:
        raise ValueError(
            f"env is {size} bytes (every NAME=VALUE, UTF-8); at most {MAX_ENV_BYTES} are allowed"
        )
    return v


def _labels(v: dict[str, str]) -> dict[str, str]:
    """Labels within ``MAX_LABELS``, ``LABEL_KEY_PATTERN`` and ``MAX_LABEL_VALUE``, or why not."""
    if len(v) > MAX_LABELS:
        raise ValueError(f"labels has {len(v)} entries; at most {MAX_LABELS} are allowed")
    for k, val in v.items():
        if not _LABEL_KEY.fullmatch(k):
            raise ValueError(
                f"label key {k[:80]!r} must be 1-63 letters, digits, '.', '_', '-' or '/', "
                "starting and ending with a letter or digit"
            )
        if len(val) > MAX_LABEL_VALUE:
            raise ValueError(
                f"label {k!r}: value of {len(val)} characters; at most {MAX_LABEL_VALUE} "
                "are allowed"
            )
        if _CONTROL.search(val):
            raise ValueError(f"label {k!r}: value must not contain control characters")
    return v


EnvVars = Annotated[dict[str, str], AfterValidator(_env)]
"""An environment within ``MAX_ENV_ENTRIES``, ``MAX_ENV_BYTES`` and the name rule."""
LabelMap = Annotated[dict[str, str], AfterValidator(_labels)]
"""A session's labels within ``MAX_LABELS``, ``LABEL_KEY_PATTERN``, ``MAX_LABEL_VALUE``."""


class EmptyBody(WireModel):
    """The body of an operation that takes none: absent or ``{}``; an unknown field is 422.

    A caller that sends ``{"memory": true}`` to ``pause`` asked for something the
    grid does not do: it is told so, not given an ordinary pause.
    """
