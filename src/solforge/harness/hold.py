"""The worker's other Python threads held off the interpreter from a call's return until its
outputs are copied to the driver.

A thread of the candidate can leave the output empty at the return and fill it a moment later
(a pool thread that sleeps a millisecond, then writes). The harness copies the outputs right
after the return, so the copy holds the empty buffer and the compared call is wrong; but on a
machine whose cores are oversubscribed the worker's main thread can be descheduled for longer
than that millisecond between the return and the copy, the thread writes first, and the late
write passes unseen (the thread's few hundred microseconds of CPU are under what the
after-return check allows an idle thread).

A thread needs the GIL to run Python code. A thread that waits for it asks the holder to let go
after the switch interval (5 ms by default) and gets it at the holder's next bytecode boundary;
the holder otherwise lets go only where it blocks (I/O, sleeps, most torch ops). Setting the
interval far beyond the window's length as the call returns means no other Python thread runs
a bytecode until the main thread blocks: the harness does not, between the return and the
copy, but for the device synchronisation after a GPU call (microseconds of an idle window) and
the copy itself (which is already reading the outputs). The interval goes back to what it was
once the outputs are handed over, or the workload failed; a thread then waiting gets the GIL
as before. A thread that was already waiting for the GIL when the call returned waits out the
interval it started with, so one that wakes just before the return can still take the GIL
within 5 ms of it.

The functions are bound at import, so a candidate that replaces `sys.setswitchinterval` does
not reach them; this module is among the harness modules whose objects the guards watch. A
Python built without the GIL (free-threaded) gets no protection from this, and neither does a
native thread of a C++ extension, which needs no GIL at all.
"""

from __future__ import annotations

import sys

# Longer than any window between a return and the copy of the outputs, however loaded the
# machine; short enough for CPython (microseconds in an unsigned long) on every platform.
HOLD_S = 100.0
_set_interval = sys.setswitchinterval
_get_interval = sys.getswitchinterval


def hold(_get=_get_interval, _set=_set_interval, _hold_s=HOLD_S) -> float:
    """Hold the other Python threads off; the interval this replaced. A plain function with
    everything bound as a default at import, touching no object's attributes: it runs between
    a call's return and the check of what a candidate could have changed (worker.py)."""
    old = _get()
    _set(_hold_s)
    return old


class OtherThreadsHeld:
    """`hold()` as a call returns (or `keep` the interval `hold` replaced), `release()` once
    its outputs are with the driver."""

    def __init__(self) -> None:
        self.saved: float | None = None

    def hold(self) -> None:
        self.keep(hold())

    def keep(self, interval: float) -> None:
        """The interval to restore (the first one, if held twice)."""
        if self.saved is None:
            self.saved = interval

    def release(self) -> None:
        if self.saved is not None:
            _set_interval(self.saved)
            self.saved = None
