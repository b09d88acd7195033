"""gVisor's upper layer read out of a build sandbox into the image's load archive (25.2).

``runsc tar rootfs-upper`` writes the overlay's upper layer (see ``layer.py``)
into a pipe (``--file /dev/fd/N``: its stdout carries a line of its own),
rewritten into the Docker layer as it comes (``layer.docker_layer``),
straight into the ``docker load`` archive
(``image.write_layer``): runsc's tar is never stored, the layer is written
once and read again only by the engine's load.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import threading
from pathlib import Path

from worker.templates.image import write_layer
from worker.templates.layer import Layer, docker_layer

__all__ = ["UpperFailed", "read_upper"]

_TIMEOUT_S = 600


class UpperFailed(Exception):
    """runsc could not write the upper layer: its last words (stderr's tail)."""


def read_upper(runsc: str, root: Path, container_id: str, archive: Path) -> Layer:
    """The sandbox's upper layer, as the Docker layer that begins ``archive``.

    Args:
        runsc: the runsc binary of the engine's runtime.
        root: runsc's state directory under this engine (``runsc --root``).
        container_id: the build sandbox (running: runsc asks its sentry for the tar).
        archive: the load archive to begin (``image.finish_archive`` ends it).

    Raises:
        UpperFailed: runsc failed, or its tar ended short.
    """
    read_fd, write_fd = os.pipe()  # not stdout: runsc says what it does there, before the tar
    cmd = [runsc, "--root", str(root), "tar", "rootfs-upper", "--file", f"/dev/fd/{write_fd}"]
    try:
        proc = subprocess.Popen(
            [*cmd, container_id],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)
    with proc, os.fdopen(read_fd, "rb") as pipe:
        timer = threading.Timer(_TIMEOUT_S, proc.kill)  # a runsc that hangs ends the read
        timer.start()
        try:
            layer = write_layer(archive, lambda out: docker_layer(pipe, out))
        except tarfile.TarError as exc:
            proc.kill()
            _, err = proc.communicate()
            raise UpperFailed(_tail(err) or f"its tar could not be read ({exc})") from None
        finally:
            timer.cancel()
        _, err = proc.communicate(timeout=_TIMEOUT_S)
    if proc.returncode != 0:
        raise UpperFailed(_tail(err) or f"exit {proc.returncode}")
    return layer


def _tail(err: bytes) -> str:
    return err.decode("utf-8", "replace").strip()[-300:]
