"""One GPU shared by several units: the timed loops take it alone, the rest of the work does not.

Most of a candidate's GPU-machine time is not timing: the unit's and the worker's starts, the
candidate's import and its kernels' first compile (in the first correctness call), the
correctness rounds, closing the worker. With one unit per GPU the GPU idles through all of it.
A local runner that puts several units on one GPU (`LocalRunner(per_gpu=N)`) gives each of
them this lock, a reader-writer lock between processes: a workload's correctness rounds and its
timed loop's warm-up hold it shared (any number of units compute side by side: nothing there is
timed), its timed calls hold it exclusively (no other unit's work is on the device while a
time is taken).
Everything else (starts, imports, builds, closing) takes no lock at all, as a spare unit's start
never did.

Writers first: a unit that asks to time waits for the rounds already running to end, and no
round starts until it has timed, so a stream of correctness rounds cannot starve the timed
loops. Two files: the gate (held briefly by whoever queues, and by a writer until it holds the
device) and the device itself (shared or exclusive).

The lock is `flock(2)` on files in the runner's private folder (mode 0700): the candidates'
workers run under other uids and never reach it, and the descriptors are not inheritable, so no
worker holds a copy. A unit process that dies frees its locks with its descriptors; a unit
that waits past WAIT_LIMIT_S for a holder that is stuck ends with DeviceBusy (its runner starts
it again) instead of waiting for ever. The driver's waits are the `device_wait` phase; they do
not count against a workload's time limit; how long it held the lock in each mode is the
held totals `held:shared` and `held:exclusive`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from solforge.harness import phases

ENV = "SOLFORGE_DEVICE_LOCK"  # the lock's folder, set by the runner for units that share a GPU
# A unit holds the lock for one workload's rounds or timed loop, each bounded by the workload's
# time limit (180 s by default); a wait this long means a holder is stuck, and the unit ends
# (its runner starts it again) rather than wait for ever.
WAIT_LIMIT_S = 900.0
POLL_S = 0.002  # a waiter tries again this often: what a turn costs in latency at most
_MODES = {fcntl.LOCK_SH: "shared", fcntl.LOCK_EX: "exclusive"}  # held totals' names (phases)
_GATE = "gate"
_DEVICE = "device"


class DeviceLock:
    """The shared-or-exclusive lock of one GPU's folder; see the module docstring."""

    def __init__(self, folder: Path, limit_s: float = WAIT_LIMIT_S) -> None:
        self.folder = folder
        self.limit_s = limit_s
        self._gate = _open(folder / _GATE)
        self._device = _open(folder / _DEVICE)

    def shared(self) -> contextlib.AbstractContextManager[float]:
        """Hold the device with other readers; yields the seconds waited for it."""
        return self._held(fcntl.LOCK_SH)

    def exclusive(self) -> contextlib.AbstractContextManager[float]:
        """Hold the device alone; yields the seconds waited for it."""
        return self._held(fcntl.LOCK_EX)

    @contextlib.contextmanager
    def _held(self, mode: int) -> Iterator[float]:
        began = time.monotonic()
        until = began + self.limit_s
        with phases.phase("device_wait"):
            # Through the gate: a reader queues behind any writer already waiting; a writer
            # holds it until the readers in flight have drained, so none starts meanwhile.
            _take(self._gate, fcntl.LOCK_EX, until, self.limit_s)
            try:
                _take(self._device, mode, until, self.limit_s)
            finally:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
        taken = time.monotonic()
        try:
            yield taken - began
        finally:
            fcntl.flock(self._device, fcntl.LOCK_UN)
            phases.held(_MODES[mode], time.monotonic() - taken)

    def close(self) -> None:
        os.close(self._gate)
        os.close(self._device)


class NoLock:
    """A GPU this unit has to itself: nothing to wait for."""

    @contextlib.contextmanager
    def shared(self) -> Iterator[float]:
        yield 0.0

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[float]:
        yield 0.0


@contextlib.contextmanager
def all_alone(folders: list[Path]) -> Iterator[None]:
    """Every GPU of `folders` held exclusively, each in turn in one order (no two holders can
    wait on each other: a unit holds one GPU's lock at most)."""
    with contextlib.ExitStack() as stack:
        for folder in sorted(folders):
            lock = DeviceLock(folder)
            stack.callback(lock.close)
            stack.enter_context(lock.exclusive())
        yield


def make_folder(folder: Path) -> Path:
    """A lock folder (for the runner): private to this uid, its two files made now."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in (_GATE, _DEVICE):
        os.close(_open(folder / name))
    return folder


@functools.cache
def current() -> DeviceLock | NoLock:
    """This process's lock: the folder the runner named in the environment, else none."""
    folder = os.environ.get(ENV)
    return DeviceLock(Path(folder)) if folder else NoLock()


class DeviceBusy(RuntimeError):
    """The GPU's lock stayed held past the wait limit."""


def _take(fd: int, mode: int, until: float, limit_s: float) -> None:
    """flock(fd, mode), given up at `until` (a blocking flock cannot be)."""
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= until:
                raise DeviceBusy("the GPU's lock (shared with other units) stayed held for "
                                 f"{limit_s:g} s: a unit holding it is stuck") from None
            time.sleep(POLL_S)


def _open(path: Path) -> int:
    # O_CLOEXEC: a worker started from this process never inherits (and could never release)
    # the lock; flock belongs to the open file description.
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
