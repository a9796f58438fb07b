"""The C library through ctypes, and one error type for a failed call."""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(what: str, result: int) -> int:
    """`result` of a libc call, or OSError naming `what` with errno's message."""
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result
