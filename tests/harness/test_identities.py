"""The identity check (harness/identities.py) and the worker's check at a call's return
(harness/return_check.py): what a candidate can alter without rebinding a watched name, and
what it can do to the check itself."""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from solforge.harness import guards, identities, protocol, return_check
from solforge.harness.identities import IdentitySnapshot, function_changes, identity_changes
from solforge.measure import timing

SRC = Path(__file__).resolve().parents[2] / "src" / "solforge"


def test_the_check_binds_the_builtins_it_calls():
    """A `builtins.any` that answers False for every `map` would make the check's fast path
    see no change; the check calls the one bound when its module was imported."""
    snapshot = IdentitySnapshot(["time", "builtins"])
    real_any, original = builtins.any, time.perf_counter
    try:
        builtins.any = lambda iterable: False if type(iterable) is map else real_any(iterable)
        time.perf_counter = lambda: 0.0
        found = identity_changes(snapshot.state)
    finally:
        builtins.any, time.perf_counter = real_any, original
    assert "time.perf_counter" in found and "builtins.any" in found
    assert identity_changes(snapshot.state) == []


def test_a_constant_of_the_harness_is_watched_like_its_functions():
    snapshot = IdentitySnapshot(["solforge.harness.guards"])
    allowance = guards.WAKE_CPU_S
    try:
        guards.WAKE_CPU_S = 1e9  # every thread's work after a return would pass as a wake-up
        assert snapshot.changed() == ["solforge.harness.guards.WAKE_CPU_S"]
    finally:
        guards.WAKE_CPU_S = allowance
    assert snapshot.changed() == []


def test_a_function_given_new_code_keeps_its_identity_but_not_its_code():
    snapshot = IdentitySnapshot(["solforge.measure.timing"])
    code, defaults = timing.summarize.__code__, timing.summarize.__defaults__
    try:
        timing.summarize.__defaults__ = (None, None, 1.0)
        assert snapshot.changed() == []  # the name still holds the same function
        assert "solforge.measure.timing.summarize" in function_changes(snapshot.state)
    finally:
        timing.summarize.__code__, timing.summarize.__defaults__ = code, defaults
    assert function_changes(snapshot.state) == []


def test_closure_cells_and_keyword_defaults_changed_in_place_are_reported():
    module = type(sys)("solforge_test_closures")

    def make():
        def wrapped():
            return 1

        def wrapper(*, scale=1.0):
            return wrapped() * scale
        return wrapper

    module.wrapper = make()
    sys.modules[module.__name__] = module
    try:
        snapshot = IdentitySnapshot([module.__name__])
        cell = module.wrapper.__closure__[0]
        cell.cell_contents = lambda: 0
        assert identity_changes(snapshot.state) == [
            "solforge_test_closures.wrapper (closure 0)"]
        cell.cell_contents = snapshot.state[1][2][1][0]
        module.wrapper.__kwdefaults__["scale"] = 0.2
        assert identity_changes(snapshot.state) == [
            "solforge_test_closures.wrapper (keyword defaults)"]
    finally:
        del sys.modules[module.__name__]


def test_pins_are_immutable_and_the_state_follows_them():
    class Link:
        pass

    link = Link()
    link.writer = object()
    snapshot = IdentitySnapshot(["time"])
    before = snapshot.state
    snapshot.pin("link", link)
    assert snapshot.state is not before and snapshot.state[-1][0][0] == "link"
    link.writer = None
    assert snapshot.changed() == ["link.writer"]
    assert identity_changes(before) == []  # a state bound earlier knows nothing of the pin
    snapshot.unpin("link")
    assert snapshot.changed() == []


def test_every_global_the_harness_rebinds_is_listed_as_rebound():
    """A module global that a `global` statement rebinds while the harness runs would read as
    altered: REBOUND lists exactly those of solforge's sources."""
    found = set()
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Global):
                found |= {f"{module}.{name}" for name in node.names}
    assert found == set(identities.REBOUND)


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120)


def test_the_tamper_hook_ends_the_process_when_a_watched_function_gets_new_code():
    done = _run("""
        from solforge.harness.identities import IdentitySnapshot, install_tamper_hook
        from solforge.measure import timing
        snapshot = IdentitySnapshot(["solforge.measure.timing"])
        install_tamper_hook(snapshot)
        (lambda: None).__code__ = (lambda: 1).__code__  # a function nobody watches: allowed
        timing.summarize.__code__ = (lambda *a, **k: None).__code__
        print("still running")
    """)
    assert done.returncode == protocol.TAMPERED_EXIT
    assert "still running" not in done.stdout
    assert done.stderr.startswith(protocol.TAMPERED_MARK)


def test_the_tamper_hook_watches_itself():
    done = _run("""
        import sys
        from solforge.harness.identities import IdentitySnapshot, install_tamper_hook
        install_tamper_hook(IdentitySnapshot(["time"]))
        import gc, types
        hooks = [f for f in gc.get_objects() if type(f) is types.FunctionType
                 and f.__qualname__ == "install_tamper_hook.<locals>.hook"]
        hooks[0].__defaults__ = (frozenset(),) + hooks[0].__defaults__[1:]
        print("still running")
    """)
    assert done.returncode == protocol.TAMPERED_EXIT and "still running" not in done.stdout


def test_what_the_return_check_calls_is_recorded_before_the_candidate():
    parts = return_check.parts()
    labels = {label for label, *_ in parts}
    assert {"signals.block.__code__", "hold.hold.__defaults__",
            "identity_changes.__code__", "signals.SIGMASK.errcheck"} <= labels
    assert all(getattr(owner, name) is then for _, owner, name, then in parts)
    assert all(names.keys() == then for _, names, then in return_check.classes())
    bound = return_check.bindings(IdentitySnapshot(["time"]).state,
                                  (*return_check.disarm(), parts, ()))
    assert len(bound) == len(return_check.FIELDS)


@pytest.mark.parametrize("stamp", [None, "inside", "outside"])
def test_the_cpu_timer_ends_the_window_where_the_call_says_it_returned(stamp):
    """A call that returns its own return moment (the worker's, before its checks) is timed
    to it; a value outside the window is ignored."""
    def run(i):
        began = time.perf_counter()
        while time.perf_counter() - began < 0.002:
            pass
        returned = time.perf_counter()
        time.sleep(0.01)  # the harness's checks after the return
        if stamp == "inside":
            return returned
        return -1.0 if stamp == "outside" else None

    measured = timing.time_iterations(run, iterations=3, warmup=0, method="cpu")
    if stamp == "inside":
        assert 2.0 <= measured.median_ms < 8.0
    else:
        assert measured.median_ms >= 12.0


def test_a_name_added_to_a_module_is_reported_where_it_can_change_what_runs():
    """A global `any` added to a module shadows the builtin for every function of it; in
    solforge's own modules any added name counts but a submodule (imports add those)."""
    snapshot = IdentitySnapshot(["time", "solforge.harness.guards"])
    try:
        guards.any = lambda iterable: False
        time.len = len  # shadows a builtin in a module the check watches
        guards.EXTRA_ALLOWANCE = 1.0
        guards.some_submodule = type(sys)("some_submodule")  # as an import would add it
        time.extra_attribute = 1  # another library's module: only builtins' names count
        found = snapshot.changed()
    finally:
        for owner, name in ((guards, "any"), (time, "len"), (guards, "EXTRA_ALLOWANCE"),
                            (guards, "some_submodule"), (time, "extra_attribute")):
            delattr(owner, name)
    assert sorted(found) == ["solforge.harness.guards.EXTRA_ALLOWANCE (added)",
                             "solforge.harness.guards.any (added)", "time.len (added)"]
    assert snapshot.changed() == []


def test_a_slot_names_cache_added_to_a_watched_class_is_not_a_change():
    """copyreg caches `__slotnames__` on a class the first time one of its objects is copied
    (torch.compile copies ops): honest, and nothing the class runs."""
    import copyreg

    snapshot = IdentitySnapshot(["time"])
    op_class = identities.watched_classes()["OpOverload"]
    had = "__slotnames__" in vars(op_class)
    copyreg._slotnames(op_class)
    try:
        assert snapshot.changed() == []
    finally:
        if not had and "__slotnames__" in vars(op_class):
            delattr(op_class, "__slotnames__")


def test_the_first_thing_after_a_return_reads_and_clears_the_hooks_in_c():
    """`disarm`'s calls run from C (no frame, no event): they take the time, return the trace
    and profile functions they clear and the frame-evaluation callback they replace."""
    import itertools
    import operator

    calls, expected = return_check.disarm()
    assert all(type(call[0]) is types.BuiltinFunctionType for call in calls)

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    seen = tuple(itertools.starmap(operator.call, calls))
    assert sys.gettrace() is None  # cleared before any Python function could run
    assert isinstance(seen[0], float)
    assert seen[1] is tracer and seen[1] is not expected[0]
    assert all(now is then for now, then in zip(seen[2:], expected[1:]))


def test_finish_sets_the_harness_own_tracer_again_before_the_identity_check():
    """A worker that started under a tracer (coverage, a debugger) has it cleared by `disarm`
    at each return; `finish` sets it again before the identity check, which compares the
    hooks with the snapshot's, so the honest call passes and the tracer is back."""
    import itertools
    import operator

    def tracer(frame, event, arg):
        return None

    class Held:
        def keep(self, interval):
            self.interval = interval

    class Worker:
        pass

    sys.settrace(tracer)
    try:
        calls, expected = return_check.disarm()
        state = IdentitySnapshot(["time"]).state
        root = (calls, expected, (), (), lambda: 0, lambda: 0.005, identity_changes, state,
                getattr, lambda fd, line: pytest.fail(line.decode()),
                lambda code: pytest.fail(f"exit {code}"), object.__getattribute__, 86, "mark")
        worker = Worker()
        worker.root, worker.held = root, Held()
        seen = tuple(itertools.starmap(operator.call, calls))  # clears the tracer
        assert sys.gettrace() is None
        assert return_check.finish(worker, root, False, "result", seen) == ("result", seen[0])
        assert sys.gettrace() is tracer
        assert worker.held.interval == 0.005
    finally:
        sys.settrace(None)
