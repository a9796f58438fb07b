"""Landlock: the process may change files only beneath the folders it is given.

Reads and execution stay unrestricted (the interpreter, PyTorch and the problem must load);
every kind of write, create, remove, rename and truncate is handled, so outside the allowed
folders each fails with EACCES whatever the file permissions say. /dev keeps plain writes to
existing nodes (/dev/null, the GPU's /dev/nvidia*), /proc its writable files (own process only:
the worker sees no other). From ABI 6 on, signals to processes outside the sandbox are denied
too. Linux syscalls 444-446; the restriction is inherited by every child and cannot be lifted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Sequence

from solforge.harness.sandbox.libc import call, libc

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
WRITE_FILE = 1 << 1
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none, or not Linux on a known syscall table)."""
    if os.uname().sysname != "Linux" or os.uname().machine not in ("x86_64", "aarch64"):
        return 0
    version = libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def write_access(abi: int) -> int:
    """Every write-like right this ABI knows."""
    rights = WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    return rights | (_REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def restrict_writes(writable: Sequence[str], devices: Sequence[str] = ("/dev", "/proc")) -> str:
    """Allow writes beneath `writable` (and to existing nodes under `devices`) only."""
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    handled = write_access(abi)
    attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else 8
    ruleset = call("landlock_create_ruleset",
                   libc.syscall(_CREATE_RULESET, ctypes.byref(attr), size, 0))
    try:
        for path in writable:
            _allow(ruleset, path, handled)
        for path in devices:
            _allow(ruleset, path, handled & (WRITE_FILE | TRUNCATE))
        call("landlock_restrict_self", libc.syscall(_RESTRICT_SELF, ruleset, 0))
    finally:
        os.close(ruleset)
    scope = ", signals scoped" if abi >= 6 else ""
    return f"ABI {abi}: writes only beneath {', '.join(writable)}{scope}"


def _allow(ruleset: int, path: str, access: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneath(access, fd)
            call(f"landlock_add_rule({path})",
                 libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0))
        finally:
            os.close(fd)
