"""The ``/etc/hosts`` of a sandbox with no network.

A sandbox with no network is created with Docker's networking disabled
(``worker.runtimes.docker``): the engine then runs no network hook for it (its
``libnetwork-setkey`` prestart hook, ~110-130 ms of every container's start on
this machine, under runc and runsc alike) and mounts none of its own
``/etc/hosts`` and ``/etc/resolv.conf``. The runtime still gives the sandbox a
loopback interface. So that ``localhost`` (and the sandbox's own host name)
still resolve in any image, a base without an ``/etc/hosts`` included, the
worker mounts this file read-only at ``HOSTS_MOUNT``; with no
``/etc/resolv.conf`` of the engine's, the sandbox sees the image's own, not the
host's resolver (no DNS in the sandbox: docs/network.md).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

__all__ = ["HOSTS", "HOSTS_MOUNT", "hosts_file"]

_log = logging.getLogger(__name__)

HOSTS_MOUNT = "/etc/hosts"
HOSTS = (
    "127.0.0.1\tlocalhost sandbox\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "ff02::1\tip6-allnodes\n"
    "ff02::2\tip6-allrouters\n"
)
"""Docker's own for a container of network ``none``, and the sandbox's host name."""


@functools.cache
def hosts_file(directory: Path) -> Path | None:
    """``HOSTS`` written once into ``directory`` (a directory the engine's host
    sees, beside the agent's zipapp), world-readable; its path. None if it cannot
    be written there: the sandboxes then keep the engine's network setup (and its
    files), as before."""
    path = directory / "sandgrid-hosts"
    try:
        if path.read_text() == HOSTS:
            return path
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    except OSError as exc:
        _log.warning("sandboxes keep the engine's network setup: %s unreadable (%s)", path, exc)
        return None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # workers of one host at once
    try:
        tmp.write_text(HOSTS)
        tmp.chmod(0o644)
        tmp.replace(path)
    except OSError as exc:
        _log.warning("sandboxes keep the engine's network setup: cannot write %s (%s)", path, exc)
        return None
    return path
