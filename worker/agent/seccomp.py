"""No user namespaces in the sandbox, whatever the runtime: a seccomp filter on PID 1.

Under runc, Docker's default seccomp profile refuses ``unshare`` and ``clone``
with ``CLONE_NEWUSER`` to a process without ``CAP_SYS_ADMIN``. runsc ignores
that profile unless registered with ``--oci-seccomp``, and with it answers
every refused call ``EPERM`` (it drops the profile's ``errnoRet``): ``clone3``
then fails where glibc needs ``ENOSYS`` to fall back to ``clone``, and no
thread can start. So the agent installs its own filter at start, inherited by
everything it runs: ``unshare``/``clone`` with ``CLONE_NEWUSER`` fail with
``EPERM``, ``clone3`` (whose flags a filter cannot read) with ``ENOSYS``.
Without a user namespace, an unprivileged process gets no other namespace.
``no-new-privileges`` (set on every sandbox) lets PID 1 install it without
``CAP_SYS_ADMIN``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

__all__ = ["CLONE_NEWUSER", "SYSCALLS", "deny_user_namespaces", "filter_program"]

CLONE_NEWUSER = 0x10000000
SYSCALLS = {
    # machine: (audit arch, clone, unshare, clone3)
    "x86_64": (0xC000003E, 56, 272, 435),
    "aarch64": (0xC00000B7, 220, 97, 435),
}
_X32_BIT = 0x40000000  # x86_64's x32 syscalls: the same numbers with this bit

# classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS, _ALU_AND_K, _JEQ_K, _RET_K = 0x20, 0x54, 0x15, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian)


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as ``(code, jt, jf, k)`` instructions; empty for an unknown machine."""
    if machine not in SYSCALLS:
        return []
    arch, clone, unshare, clone3 = SYSCALLS[machine]
    return [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, 9, arch),  # another ABI: allow
        (_LD_W_ABS, 0, 0, _NR),
        (_ALU_AND_K, 0, 0, 0xFFFFFFFF & ~_X32_BIT),
        (_JEQ_K, 7, 0, clone3),
        (_JEQ_K, 1, 0, unshare),
        (_JEQ_K, 0, 4, clone),
        (_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_ALU_AND_K, 0, 0, CLONE_NEWUSER),
        (_JEQ_K, 1, 0, 0),
        (_RET_K, 0, 0, _ERRNO | errno.EPERM),
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, _ERRNO | errno.ENOSYS),
    ]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def deny_user_namespaces() -> bool:
    """Install the filter on this process and all it will start; False if it could not."""
    program = filter_program(os.uname().machine)  # platform.machine(), without importing it
    if not program:
        return False
    code = b"".join(struct.pack("=HBBI", *ins) for ins in program)
    prog = _Fprog(len(program), code)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0)
