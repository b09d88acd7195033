"""gVisor's upper layer of a build sandbox, as a Docker image layer (25.2).

Under runsc the sandbox's root filesystem is an overlay kept inside the
sandbox (``--overlay2=root:memory``, the ``runsc-build`` runtime): what a build step writes
never reaches the container's directory on the host, so ``docker commit`` of
a gVisor container sees nothing. gVisor's own commit is ``runsc tar
rootfs-upper``: a tar of the overlay's upper layer, with deletions as overlayfs
writes them (a character device 0/0, an ``opaque`` directory xattr). This
module rewrites that tar into the layer format Docker and the OCI image spec
read (``.wh.<name>``, ``.wh..wh..opq``), leaves out the paths the grid itself
mounted into the build sandbox, and counts its size and diff id on the way.
Pure: a stream in, a stream out.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any

__all__ = ["SKIPPED", "Layer", "docker_layer"]

#: Paths of the build sandbox that are the grid's, not the template's: the
#: agent's mount point, the egress directory, the kernel's and the engine's.
SKIPPED = (
    "opt/sandgrid",
    "run/sandgrid-egress",
    "proc",
    "sys",
    "dev",
    "etc/hostname",
    "etc/hosts",
    "etc/resolv.conf",
    ".dockerenv",
)
_OPAQUE = ("SCHILY.xattr.trusted.overlay.opaque", "SCHILY.xattr.user.overlay.opaque")


@dataclass(frozen=True)
class Layer:
    """A layer written: its diff id (sha256 of the tar), its size, its entries."""

    diff_id: str
    size: int
    entries: int


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what it passes on to ``dst``."""

    def __init__(self, dst: IO[bytes]) -> None:
        self.dst = dst
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.dst.write(data)
        return len(data)


def _skipped(name: str) -> bool:
    clean = str(PurePosixPath("/", name))[1:]
    return any(clean == s or clean.startswith(s + "/") for s in SKIPPED)


def _whiteout(member: tarfile.TarInfo) -> bool:
    return member.ischr() and member.devmajor == 0 and member.devminor == 0


def docker_layer(upper: IO[bytes], out: IO[bytes]) -> Layer:
    """Rewrite ``runsc tar rootfs-upper``'s tar, read as a stream, into the Docker layer ``out``.

    One pass: runsc's output is read as it comes (a pipe), and the layer's diff id
    and size are counted as it is written.

    Args:
        upper: the upper layer as runsc writes it (read in order, never sought).
        out: where the layer's bytes go (written in order).

    Returns:
        The layer with its diff id and size (bytes of the uncompressed tar).
    """
    entries = 0
    sink = _Hashing(out)
    with (
        tarfile.open(fileobj=upper, mode="r|") as src,
        tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            name = str(PurePosixPath("/", member.name))[1:]
            if not name or _skipped(name):
                continue
            entries += 1
            if _whiteout(member):
                path = PurePosixPath(name)
                dst.addfile(_empty(str(path.parent / f".wh.{path.name}"), member))
                continue
            opaque = member.isdir() and any(member.pax_headers.get(k) == "y" for k in _OPAQUE)
            member.pax_headers = {k: v for k, v in member.pax_headers.items() if "overlay" not in k}
            member.name = name
            fileobj = src.extractfile(member) if member.isreg() else None
            dst.addfile(member, fileobj)
            if opaque:
                dst.addfile(_empty(f"{name}/.wh..wh..opq", member))
    return Layer(f"sha256:{sink.sha.hexdigest()}", sink.size, entries)


def _empty(name: str, like: tarfile.TarInfo) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = like.mtime
    info.mode = 0o644
    return info
