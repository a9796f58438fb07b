"""Holding the other Python threads off the interpreter between a call's return and the copy of
its outputs: a late writer that wakes in that window cannot run until the harness lets go."""

import sys
import threading
import time

from solforge.harness.hold import HOLD_S, OtherThreadsHeld

WAKE_S = 0.01  # the late writer sleeps this long, like a pool thread that writes after a return
WINDOW_S = 0.3  # the main thread stays busy this long without blocking: a descheduled harness


def _late_writer_during_busy_window(held: OtherThreadsHeld | None) -> tuple[list[float], float]:
    """When a sleeping thread got to run, and when the main thread's busy window ended."""
    woke: list[float] = []
    started = threading.Event()

    def late() -> None:
        started.set()
        time.sleep(WAKE_S)
        woke.append(time.perf_counter())

    thread = threading.Thread(target=late)
    thread.start()
    started.wait()
    if held is not None:
        held.hold()
    end = time.perf_counter() + WINDOW_S
    while time.perf_counter() < end:  # pure bytecode: never blocks, never lets go of the GIL
        pass
    window_ended = time.perf_counter()
    if held is not None:
        held.release()
    thread.join()
    return woke, window_ended


def test_without_holding_a_late_writer_runs_inside_the_window():
    """The control: the switch interval lets the thread in within milliseconds of waking."""
    woke, window_ended = _late_writer_during_busy_window(None)
    assert woke and woke[0] < window_ended


def test_held_threads_run_only_after_release():
    before = sys.getswitchinterval()
    woke, window_ended = _late_writer_during_busy_window(OtherThreadsHeld())
    assert woke and woke[0] >= window_ended
    assert sys.getswitchinterval() == before


def test_release_restores_the_interval_the_call_left():
    """The interval a call set (the candidate's business inside its own call) comes back, and
    a release without a hold changes nothing."""
    before = sys.getswitchinterval()
    held = OtherThreadsHeld()
    try:
        sys.setswitchinterval(0.002)
        held.release()
        assert sys.getswitchinterval() == 0.002
        held.hold()
        held.hold()  # a second hold keeps the first saved value
        assert sys.getswitchinterval() == HOLD_S
        held.release()
        assert sys.getswitchinterval() == 0.002
    finally:
        sys.setswitchinterval(before)


def test_a_replaced_setswitchinterval_does_not_reach_the_hold(monkeypatch):
    """The functions are bound at import: a candidate's patch of `sys` leaves the hold working."""
    monkeypatch.setattr(sys, "setswitchinterval", lambda seconds: None)
    before = sys.getswitchinterval()
    held = OtherThreadsHeld()
    held.hold()
    try:
        assert sys.getswitchinterval() == HOLD_S
    finally:
        held.release()
    assert sys.getswitchinterval() == before
