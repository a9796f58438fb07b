"""Seccomp: deny the calls that reach into another process's memory or file table.

A classic BPF program (no libseccomp) installed with prctl. Every listed call fails with EPERM;
a call made through another ABI (i386 `int 0x80` or x32 on x86-64) fails too, since its numbers
differ and would slip past the list. Needs `no_new_privs` (or CAP_SYS_ADMIN) first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from solforge.harness.sandbox.libc import call, libc

# Syscall numbers of the denied calls, per architecture (linux uapi unistd tables).
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd")
_NUMBERS = {
    "x86_64": (0xC000003E, {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                            "kcmp": 312, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                             "kcmp": 272, "pidfd_getfd": 438}),
}
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported_arch() -> str | None:
    machine = os.uname().machine
    return machine if machine in _NUMBERS else None


def filter_program(machine: str) -> bytes:
    """The BPF instructions (8 bytes each: code, jt, jf, k) for `machine`."""
    audit_arch, numbers = _NUMBERS[machine]
    ops = [(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
           (_JEQ_K, 1, 0, audit_arch), (_RET_K, 0, 0, _RET_EPERM),  # a foreign ABI: denied
           (_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        ops += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, _RET_EPERM)]
    for name in DENIED:
        ops += [(_JEQ_K, 0, 1, numbers[name]), (_RET_K, 0, 0, _RET_EPERM)]
    ops.append((_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("=HBBI", *op) for op in ops)


def deny_cross_process_calls() -> str:
    """Install the filter on this thread (and everything it starts); a one-line description."""
    machine = supported_arch()
    if machine is None:
        raise OSError(f"no seccomp syscall table for {os.uname().machine}")
    code = ctypes.create_string_buffer(filter_program(machine))
    program = _Program(len(code.raw) // 8, ctypes.cast(code, ctypes.c_void_p))
    call("prctl(PR_SET_SECCOMP)", libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                                             ctypes.byref(program), 0, 0))
    return f"{', '.join(DENIED)} denied ({machine})"
