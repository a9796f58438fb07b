"""The worker's signal mask: no signal handler of the candidate runs after a call returned.

Python runs a signal handler in the main thread between two bytecodes, wherever the
interpreter is. A timer the candidate sets at the end of a call (`setitimer`, `alarm`,
`timer_create`, a child that sends a signal later) would run its handler in the harness after
the call returned, where it could compute the outputs the harness is about to copy, outside
the timed window. Python's own handler only flags the signal; it may be delivered to any
thread that leaves it unblocked, and the main thread then runs the Python handler anyway. So
every signal is blocked in every thread of the worker from its first instruction:
- the driver starts each worker with them blocked (`children_start_blocked`): a child inherits
  its parent's mask across fork and exec, and every thread its creator's, the interpreter's,
  torch's and the CUDA driver's threads included;
- a blocked signal stays pending and runs no handler, so a timer set during a call does
  nothing (the output it was to compute is left as it was);
- the call may unblock signals in its own thread: `block()`, the first thing after it returns,
  blocks them again and says which were unblocked (a handler that ran before that ran inside
  the call, its work timed with it);
- a thread that unblocks signals for itself is seen in /proc (`unblocked_threads`);
- either is a cheat only where the signal would run a handler other than those the process
  had before the candidate was imported (`Dispositions.reachable`).
SIGKILL and SIGSTOP cannot be blocked and run no handler. A fault (SIGSEGV, SIGBUS, SIGFPE,
SIGILL) raised by the faulting instruction is delivered even when blocked: the kernel ends
the process with it, as it would anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

BLOCKED = frozenset(int(s) for s in signal.valid_signals()) - {int(signal.SIGKILL),
                                                               int(signal.SIGSTOP)}
BLOCKED_BITS = sum(1 << (n - 1) for n in BLOCKED)  # bit n-1: signal n, as the kernel counts
# glibc's sigset_t is 1024 bits; Linux's signals (1-64) are all in its first 64-bit word.
_SIGSET = ctypes.c_uint64 * 16
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def children_start_blocked() -> Iterator[None]:
    """Every signal blocked in this thread for the block: a child started in it starts with
    them blocked (the driver's own mask is restored after)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# The libc function `block` calls, bound once (its `errcheck`, `restype` and `argtypes` are
# attributes a candidate could set: the worker checks them before each use).
SIGMASK = _libc.pthread_sigmask


def block(_sigmask=SIGMASK, _byref=ctypes.byref, _sigset=_SIGSET, _bits=BLOCKED_BITS,
          _how=int(signal.SIG_BLOCK)) -> int:
    """Block every signal in this thread; the bits of those that were unblocked until now.

    It runs between a call's return and the end of its timed window, so it calls libc
    directly (a few microseconds; `signal.pthread_sigmask` builds an enum per blocked signal,
    hundreds of microseconds), and everything it uses is bound as a default at import: it runs
    before the check of the names a candidate could have rebound (worker.py)."""
    old = _sigset()
    if _sigmask(_how, _byref(_sigset(_bits)), _byref(old)) != 0:
        raise OSError(ctypes.get_errno(), "pthread_sigmask failed")
    return _bits & ~old[0]


def unblocked_threads() -> dict[int, int]:
    """The threads of this process (by native id) that leave a signal unblocked, and the bits
    of those signals, from each thread's SigBlk in /proc."""
    found = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            mask = _status_field(f"/proc/self/task/{tid}/status", b"SigBlk")
            if mask is not None and BLOCKED_BITS & ~mask:
                found[int(tid)] = BLOCKED_BITS & ~mask
    return found


@dataclass(frozen=True)
class Dispositions:
    """Which signals had a handler when the guards' snapshot was taken (before the
    candidate's import), and the Python handler of each."""

    caught: int  # SigCgt: the bits of the signals with a handler, Python's or a library's
    handlers: tuple[object, ...]  # signal.getsignal of signals 1-64 (None where invalid)

    @classmethod
    def now(cls) -> Dispositions:
        return cls(_status_field("/proc/self/status", b"SigCgt") or 0,
                   tuple(_python_handler(n) for n in range(1, 65)))

    def reachable(self, bits: int) -> int:
        """Of `bits` (unblocked signals), those whose delivery would run a handler other than
        the snapshot's own: a signal left to its default action or ignored runs no code, and
        the interpreter's own handler (SIGINT's) runs nothing of the candidate's. Unblocking
        one of those is harmless, and some libraries do (their threads, their children)."""
        caught = _status_field("/proc/self/status", b"SigCgt") or 0
        found = 0
        for number in range(1, 65):
            bit = 1 << (number - 1)
            if not bits & caught & bit:
                continue
            if self.caught & bit and _python_handler(number) is self.handlers[number - 1]:
                continue
            found |= bit
        return found


def _python_handler(number: int) -> object:
    try:
        return signal.getsignal(number)
    except (ValueError, OSError):
        return None


def _status_field(status_file: str, field: bytes) -> int | None:
    """A signal-mask field (SigBlk, SigCgt) of a /proc status file (None when the thread ended
    meanwhile)."""
    try:
        fd = os.open(status_file, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 8192)
    except OSError:
        return None
    finally:
        os.close(fd)
    at = text.find(b"\n" + field + b":")
    if at < 0:
        return None
    return int(text[at + len(field) + 2:text.index(b"\n", at + 1)], 16)


def names(bits: int) -> str:
    """'SIGALRM, SIGUSR1' for a mask's bits (real-time signals as SIGRTMIN+k)."""
    found = []
    for number in (n for n in range(1, 65) if bits >> (n - 1) & 1):
        try:
            found.append(signal.Signals(number).name)
        except ValueError:
            found.append(f"SIGRTMIN+{number - signal.SIGRTMIN}")
    return ", ".join(found)
