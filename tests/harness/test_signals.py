"""The worker's signal mask (harness/signals.py): every signal blocked in every thread of a
worker, a call that unblocks one caught at its return, a thread that does seen in /proc."""

from __future__ import annotations

import ast
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import torch

from solforge.harness import signals
from solforge.harness.guards import Guards


def _in_fresh_thread(work):
    """Run `work` in a new thread (its mask is its own) and return what it returned."""
    box = []
    thread = threading.Thread(target=lambda: box.append(work()))
    thread.start()
    thread.join()
    return box[0]


def test_block_says_what_the_thread_had_unblocked():
    def work():
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        first = signals.block()
        second = signals.block()
        return first, second, signal.pthread_sigmask(signal.SIG_BLOCK, [])

    first, second, mask = _in_fresh_thread(work)
    assert first == signals.BLOCKED_BITS  # everything was unblocked
    assert second == 0  # and is blocked now
    assert {int(s) for s in mask} >= signals.BLOCKED


def test_a_child_started_in_the_block_has_every_signal_blocked():
    probe = ("import signal;print(sorted(int(s) for s in "
             "signal.pthread_sigmask(signal.SIG_BLOCK, [])))")

    def started(blocked: bool) -> set[int]:
        def work():
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            if not blocked:
                return subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                      text=True, check=True).stdout
            with signals.children_start_blocked():
                out = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                     text=True, check=True).stdout
            assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # restored
            return out
        return set(ast.literal_eval(_in_fresh_thread(work)))

    assert started(blocked=True) >= signals.BLOCKED
    assert not started(blocked=False) & signals.BLOCKED


@contextlib.contextmanager
def _thread_unblocking(number: int) -> Iterator[int]:
    """A thread that blocks everything, unblocks signal `number` and idles; its native id."""
    ready, done = threading.Event(), threading.Event()
    native = []

    def unblocking():
        signals.block()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        native.append(threading.get_native_id())
        ready.set()
        done.wait()

    thread = threading.Thread(target=unblocking)
    thread.start()
    ready.wait()
    try:
        yield native[0]
    finally:
        done.set()
        thread.join()


def test_unblocked_threads_reads_each_threads_mask():
    with _thread_unblocking(signal.SIGUSR1) as tid:
        found = signals.unblocked_threads()
    assert found[tid] == 1 << (signal.SIGUSR1 - 1)
    assert signals.names(found[tid]) == "SIGUSR1"


def test_guards_flag_a_thread_that_unblocks_a_signal_with_a_new_handler():
    guards = Guards(torch.device("cpu"))
    assert not [v for v in guards.check(children=False) if "signals" in v.message]
    with _thread_unblocking(signal.SIGALRM) as tid:
        # no handler: the signal's default action runs no code (a library may do this)
        quiet = [v.message for v in guards.check(children=False)]
        previous = signal.signal(signal.SIGALRM, lambda number, frame: None)
        try:
            messages = [v.message for v in guards.check(children=False)]
        finally:
            signal.signal(signal.SIGALRM, previous)
    assert not [m for m in quiet if "signals" in m], quiet
    assert any(f"thread {tid}: SIGALRM" in m for m in messages), messages


def test_reachable_keeps_only_signals_that_run_a_new_handler():
    before = signals.Dispositions.now()
    sigint, sigusr2 = 1 << (signal.SIGINT - 1), 1 << (signal.SIGUSR2 - 1)
    assert before.reachable(sigint | sigusr2) == 0  # Python's own SIGINT handler; no handler
    previous = signal.signal(signal.SIGINT, lambda number, frame: None)
    try:
        assert before.reachable(sigint | sigusr2) == sigint  # a new handler on SIGINT
    finally:
        signal.signal(signal.SIGINT, previous)
