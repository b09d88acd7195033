"""What snapshots need from a sandbox: five file operations, defined once.

``SandboxFiles`` is the interface ``sync.snapshot_sandbox`` and
``sync.restore_sandbox`` drive. The production implementation is the
agent (``worker.sandboxes.files.AgentFiles``, every ``SandboxManager``'s
``files``): each call is one request to the in-sandbox agent
(docs/agent-protocol.md). Tests use a double over a host directory
(tests/support/hostdir.py) that runs the agent's own file code there.

``S`` is the implementation's handle of one sandbox (a ``Sandbox`` of the
manager, a ``Path`` for the double); the snapshot code only passes it through.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = ["FileRange", "SandboxFiles"]

S = TypeVar("S")


class FileRange(NamedTuple):
    """Bytes of a file from some offset (``read_range``), with the file's size and
    mtime as they were after the read: a file that changes between two reads
    shows it there."""

    data: bytes
    size: int
    mtime_ns: int


class SandboxFiles(ABC, Generic[S]):
    """``scan``, ``pack``, ``unpack``, ``read_range``, ``write_range`` of one sandbox ``S``.

    Every path is absolute, under the snapshot roots; no operation follows a
    symlink out of them.
    """

    @abstractmethod
    def scan(self, sbx: S, roots: list[str]) -> Sequence[Any]:
        """The snapshot manifest of ``roots``: rows sorted by path.

        Returns:
            ``(path, type, mode, size, sha256, target)`` per entry (or mappings
            with those keys); ``sha256`` only for files, ``target`` only for links.

        Raises:
            InvalidInput: roots other than the snapshot roots.
            SandboxError: the sandbox failed.
        """

    def inlined(self, sbx: S) -> Mapping[str, bytes]:
        """Bytes of small files the last ``scan`` read, by path (none by default): the
        snapshot takes a content from here instead of ``pack`` when it hashes to the
        sha256 the scan gave (stale bytes never do). Handed over once.
        """
        return {}

    def read_direct(self, sbx: S, files: Sequence[tuple[str, int]]) -> Mapping[str, bytes]:
        """Bytes of regular files ``(path, size)`` read without a request to the
        sandbox, by path, for those it could (none by default): the snapshot takes
        a content from here instead of ``pack`` when it hashes to the sha256 the
        scan gave, exactly as from ``inlined``. Never raises for a file it could
        not read; it is left out.
        """
        return {}

    @abstractmethod
    def pack(self, sbx: S, paths: list[str]) -> bytes:
        """A tar (plain, or gzip: both are read) of these regular files, for the store.

        The store takes their bytes from it.

        Raises:
            InvalidInput: a path outside the roots.
            SandboxError: the sandbox failed.
        """

    @abstractmethod
    def unpack(self, sbx: S, data: bytes, roots: list[str], clear: bool) -> int:
        """Extract a tar (names relative to ``/``) into ``roots``, after emptying them
        if ``clear``; the whole tar is checked first, so a bad one changes nothing.

        Returns:
            How many files were written.

        Raises:
            InvalidInput: a member outside the roots or under a link.
            SandboxError: the sandbox failed.
        """

    @abstractmethod
    def read_range(self, sbx: S, path: str, offset: int, length: int) -> FileRange:
        """Up to ``length`` bytes of a regular file from ``offset`` (fewer at its
        end), with the file's size and mtime after the read: a file too large for
        ``pack`` is read in such chunks.

        Raises:
            InvalidInput: not a regular file under the roots, or ``length`` too large.
            SandboxError: the sandbox failed.
        """

    @abstractmethod
    def write_range(
        self,
        sbx: S,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        *,
        mode: int,
        final: bool,
        mtime: float | None = None,
    ) -> int:
        """Write one chunk of a file under ``roots``; chunks come in order.

        The chunk at offset 0 creates the file afresh (a file or link in its way
        is removed, never written through); a later one must find the file
        exactly ``offset`` bytes long. The ``final`` chunk sets ``mode`` (and
        ``mtime``).

        Returns:
            The file's size after the write.

        Raises:
            InvalidInput: outside the roots or under a link, chunks out of order,
                or the workspace is full (``No space left on device``).
            SandboxError: the sandbox failed.
        """
