"""Objects in a local directory: one machine, no server.

Each
key is a file under ``root``; a write goes to a hidden temporary file beside it
and is renamed into place, so a reader sees the old object or the new one,
like an S3 PUT; a key's mtime is its file's. Nothing is fsynced: a torn blob
after a power loss fails its hash on restore rather than restoring garbage.

Configured by ``SANDGRID_WORKER__SNAPSHOT_STORE=local`` and
``SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR``. Not shared between machines: a
session snapshotted here can only be restored here, so use it for a single-node
grid, development and tests.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandgrid.errors import ErrorCode, InfrastructureError, InvalidInput
from sandgrid.wire.objects.base import ObjectStore, StoreConflict

__all__ = ["LocalObjects"]


class LocalObjects(ObjectStore):
    """Objects as files under a directory (see the module doc).

    Args:
        root: the directory; created if missing.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.location = f"local directory {self.root}"
        with self._io("open"):
            self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if key.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise InvalidInput(f"bad store key {key!r}", operation="snapshot")
        return self.root.joinpath(*parts)

    @contextmanager
    def _io(self, op: str) -> Iterator[None]:
        try:
            yield
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:
            raise InfrastructureError(
                f"snapshot store {self.location} failed to {op}: {exc}",
                code=ErrorCode.STORE_UNAVAILABLE,
                operation=f"snapshot.{op}",
                context={"store": self.location},
            ) from exc

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._io("write"):
            path.parent.mkdir(parents=True, exist_ok=True)
            _replace(path, data)

    def get(self, key: str) -> bytes:
        try:
            with self._io("read"):
                return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(key) from None

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, _tag(data)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        """Compare and write under an exclusive ``flock`` of a hidden lock file
        beside the key, so processes sharing the directory cannot interleave."""
        path = self._path(key)
        with self._io("write"):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    current: str | None = _tag(path.read_bytes())
                except FileNotFoundError:
                    current = None
                if current != tag:
                    raise StoreConflict(key)
                _replace(path, data)
            finally:
                os.close(fd)
        return _tag(data)

    def mtime(self, key: str) -> float | None:
        try:
            with self._io("stat"):
                return self._path(key).stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list(self, prefix: str) -> list[str]:
        head, _, _ = prefix.rpartition("/")
        top = self._path(head) if head else self.root
        out: list[str] = []
        with self._io("list"):
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                for name in filenames:
                    key = name if rel == "." else f"{rel}/{name}"
                    if not name.startswith(".") and key.startswith(prefix):
                        out.append(key)
        return out

    def delete(self, key: str) -> None:
        with self._io("delete"):
            self._path(key).unlink(missing_ok=True)


def _tag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` beside ``path`` and rename it into place: readers see the old
    bytes or the new ones."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
