"""The ids of one thread: raw ``setgroups``/``setresgid``/``setresuid`` for the caller only.

Linux and gVisor keep credentials per thread; glibc's wrappers (and so
Python's ``os.setuid``) change every thread of the process. Calling the system
calls directly changes only the calling thread, which is how PID 1 and the
launcher host act as the user without a fork:

- ``acting_as_user``: this thread takes the user's *effective* ids (and no
  groups), its real and saved ids stay root. Files are reached as the user (no
  effective capabilities either), while a user's process can neither signal,
  trace nor ``prlimit`` the thread or its process: those checks look at the
  real and saved ids (tested on runc and runsc). The scan runs so.
- ``spawn_ids``: real and effective ids of the user, saved 0, for the moment
  of a ``posix_spawn`` whose child must be the user entirely (the launcher
  host's serving thread; its main thread stays root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

from .limits import GID, UID

__all__ = ["SYSCALLS", "acting_as_user", "drop_groups", "root_ids", "spawn_ids", "supported"]

SYSCALLS = {"x86_64": (116, 119, 117), "aarch64": (159, 149, 147)}
"""Per machine: the numbers of ``setgroups``, ``setresgid`` and ``setresuid``."""
_KEEP = -1  # setres*id: leave this one as it is
_LIBC = ctypes.CDLL(None, use_errno=True)
_NUMBERS = SYSCALLS.get(os.uname().machine)  # looked up once: a spawn and a scan make 4-6 calls


def supported() -> bool:
    """Whether this machine's system call numbers are known (else fork as before)."""
    return _NUMBERS is not None


def _call(index: int, *args: Any) -> None:
    """System call ``index`` of ``SYSCALLS`` for the calling thread alone."""
    assert _NUMBERS is not None, "threadcreds: unknown machine (see supported())"
    if _LIBC.syscall(_NUMBERS[index], *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _raw(index: int, *ids: int) -> None:
    """``setresgid`` (1) or ``setresuid`` (2) of this thread; -1 leaves one as it is."""
    _call(index, *(ctypes.c_long(i) for i in ids))


def _set_groups(groups: list[int]) -> None:
    _call(0, ctypes.c_long(len(groups)), (ctypes.c_uint * max(len(groups), 1))(*groups))


def drop_groups() -> None:
    """No supplementary groups for this thread (``setgroups(0, NULL)``)."""
    _set_groups([])


def spawn_ids() -> None:
    """This thread: real and effective uid/gid of the user, saved 0 (it can come back)."""
    _raw(1, GID, GID, 0)
    _raw(2, UID, UID, 0)


def root_ids() -> None:
    """This thread: root's ids again, real, effective and saved."""
    _raw(2, 0, 0, 0)
    _raw(1, 0, 0, 0)


@contextlib.contextmanager
def acting_as_user() -> Iterator[None]:
    """Within: this thread acts as the user (effective uid/gid 1000, no groups);
    its real and saved ids stay root, so it takes root's effective ids back after.

    Raises:
        OSError: the thread could not take the user's ids (nothing was changed then
            but what is undone here). If it cannot take root's back, the process
            exits: a PID 1 thread stuck as the user would fail every later request.
    """
    groups = os.getgroups()
    drop_groups()
    try:
        _raw(1, _KEEP, GID, _KEEP)
        _raw(2, _KEEP, UID, _KEEP)
        yield
    finally:
        try:
            _raw(2, _KEEP, 0, _KEEP)
            _raw(1, _KEEP, 0, _KEEP)
            _set_groups(groups)
        except OSError:  # pragma: no cover - root's saved ids always allow it
            os._exit(70)
