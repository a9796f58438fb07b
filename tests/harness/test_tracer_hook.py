"""The audit hook that ends the worker when anything but the harness sets a trace or profile
function (harness/tracer_hook.py), and the timing records it protects: tuples held in the
timing frames' locals."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from solforge.harness import protocol, tracer_hook
from solforge.measure import timing

# A process with the hook installed: `setter` is the harness's frame that may set a tracer,
# every function of this script and the frames below it are the harness's.
PRELUDE = """
    import sys, threading, weakref
    from solforge.harness import tracer_hook

    def setter(function):
        sys.settrace(function)

    def other(function):
        sys.settrace(function)

    def nested():
        setter(None)

    hook = tracer_hook.install([setter.__code__], tracer_hook.harness_codes(["__main__"]))
"""


def _run(script: str) -> subprocess.CompletedProcess:
    source = textwrap.dedent(PRELUDE) + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=120)


def _ended(done: subprocess.CompletedProcess) -> bool:
    return (done.returncode == protocol.TAMPERED_EXIT and "still running" not in done.stdout
            and "set by code other than the harness's" in done.stderr)


def test_the_harness_frame_may_set_and_clear_a_tracer():
    done = _run("""
        nested()
        setter(lambda *a: None)
        setter(None)
        sys.setprofile  # reading is not an event
        print("still running")
    """)
    assert done.returncode == 0, done.stderr
    assert "still running" in done.stdout


def test_a_tracer_set_by_other_code_ends_the_process():
    done = _run("""
        other(None)
        print("still running")
    """)
    assert _ended(done), (done.returncode, done.stderr)


def test_a_profile_function_set_by_other_code_ends_the_process():
    done = _run("""
        sys.setprofile(None)
        print("still running")
    """)
    assert _ended(done), (done.returncode, done.stderr)


def test_the_harness_code_called_from_other_code_ends_the_process():
    """A function made from the harness's code runs with a caller of the candidate's below."""
    done = _run("""
        import types
        fake = types.FunctionType(setter.__code__, {"sys": sys})
        def candidate():
            fake(None)
        candidate()
        print("still running")
    """)
    assert _ended(done), (done.returncode, done.stderr)


def test_a_weakref_finalizer_that_sets_a_tracer_ends_the_process():
    """weakref.finalize calls sys.settrace from its own frame, not the harness's."""
    done = _run("""
        class Box:
            pass
        box = Box()
        weakref.finalize(box, sys.settrace, None)
        del box
        print("still running")
    """)
    assert _ended(done), (done.returncode, done.stderr)


def test_a_thread_started_under_threading_settrace_may_set_its_own():
    done = _run("""
        threading.settrace(lambda *a: None)
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        threading.settrace(None)
        print("still running")
    """)
    assert done.returncode == 0, done.stderr
    assert "still running" in done.stdout


def test_the_tamper_hook_watches_the_tracer_hook():
    """Its defaults replaced (every setter allowed) ends the process at once."""
    done = _run("""
        from solforge.harness.identities import IdentitySnapshot, install_tamper_hook
        install_tamper_hook(IdentitySnapshot(["time"]), also=(hook,))
        hook.__defaults__ = tuple(hook.__defaults__)
        print("still running")
    """)
    assert done.returncode == protocol.TAMPERED_EXIT and "still running" not in done.stdout


def test_codes_of_finds_methods_and_nested_code():
    codes = tracer_hook.codes_of([timing])
    assert timing.summarize.__code__ in codes
    assert timing.ClockSampler.__init__.__code__ not in codes  # another module's class
    assert timing._Tools.made.__func__.__code__ in codes
    inner = [c for c in timing.time_iterations.__code__.co_consts if hasattr(c, "co_code")]
    assert all(code in codes for code in inner)


def test_the_cpu_timer_keeps_its_times_in_a_tuple():
    """What a call finds in the timing loop's frame cannot be changed in place."""
    seen = []

    def call(i: int) -> None:
        frame = sys._getframe(1)
        seen.append(type(frame.f_locals["times"]))

    result = timing.time_iterations(call, iterations=3, warmup=1, method="cpu")
    assert seen == [tuple] * 4
    assert isinstance(result.times_ms, tuple) and len(result.times_ms) == 3


def test_a_timing_cannot_be_given_other_times():
    result = timing.summarize("cpu", (1.0, 2.0, 3.0))
    with pytest.raises(AttributeError):
        object.__setattr__(result, "times_ms", (0.1,))
    assert result.times_ms == (1.0, 2.0, 3.0)
