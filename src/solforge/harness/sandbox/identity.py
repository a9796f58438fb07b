"""Who the sandboxed process is: a private unprivileged uid, no groups, no capabilities,
`no_new_privs` (no setuid binary or file capability can give any back).

The uid is drawn per sandbox from a range no account uses, so every file it can own was made
for it, and every process running as it belongs to that one sandbox.
"""

from __future__ import annotations

import ctypes
import os

from solforge.harness.sandbox.libc import call, libc

UID_RANGE = (0x4000_0000, 0x7000_0000)  # far above any real account, below the 32-bit limit
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_SET_PDEATHSIG = 38, 24, 1
_CAP_VERSION_3 = 0x20080522
_LAST_CAP = 63


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def draw_uid() -> int:
    import secrets  # the driver's side only: kept out of the launcher's start-up

    low, high = UID_RANGE
    return low + secrets.randbelow(high - low)


def drop_to(uid: int) -> None:
    """Become `uid` (gid the same number) with no supplementary groups; needs root."""
    for cap in range(_LAST_CAP + 1):  # the bounding set too, so nothing can be regained
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break  # past the kernel's last capability
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (a user namespace's owner has all)."""
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    call("capset", libc.capset(ctypes.byref(header), ctypes.byref(data)))


def no_new_privs() -> None:
    call("prctl(PR_SET_NO_NEW_PRIVS)", libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def die_with_parent(signal_number: int) -> None:
    """Receive `signal_number` when the parent dies (set after the uid change, which clears it)."""
    call("prctl(PR_SET_PDEATHSIG)", libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0))


def effective_capabilities() -> int:
    """This process's effective capability mask, from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0
