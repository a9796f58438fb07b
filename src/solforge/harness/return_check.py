"""What the worker binds before each call of the candidate to check, the moment it returns,
that nothing the harness runs next was altered during it.

Every check the harness runs after a call is Python, and a candidate that shares the process
can alter what runs: rebind a name the check looks up (`builtins.any`), replace a method on
the way to it (`Worker._verify`), or give a function another `__code__`; an alteration that
restores itself once it has run leaves nothing for a later check to find. What cannot be
altered from Python is a frame that is already running: its code, and the values on its
stack. (Its local variables too, but for a trace function set on that very frame: up to
Python 3.12 the interpreter writes a traced frame's `f_locals` back after each trace event.)

So the frame that called the candidate (`Worker._run`, for the import and every call) loads
onto its stack, before the call, `finish`, the tuple built here (`bindings`) and the calls of
`disarm`; after the return, on the same line (no line event in between), it makes them from
C: they take the time, read and clear the trace, profile and frame-evaluation hooks and read
the `sys.monitoring` tools, so that no function of the candidate's runs before `finish`.
`finish` then compares, in order:
1. those hooks, and the collector's state (a collection runs callbacks and finalizers), with
   what they were;
2. the few objects it calls next (`parts`: the code and defaults of `signals.block`,
   `hold.hold` and `identities.identity_changes`, the attributes of the libc function `block`
   calls; `classes`: the names of the ctypes classes it calls);
3. after `block` and `hold` (the signals and the other threads held off, as before),
   `identity_changes` over the snapshot's state: every watched name, function, module and
   pinned object (identities.py);
and if anything differs it writes one line to stderr and ends the process with
`protocol.TAMPERED_EXIT`, through `os.write` and `os._exit` bound here: whatever would report
it the usual way may be what was altered. Only after that does it touch an attribute of any
object (an attribute store could run a `__setattr__` the call added to a class). When the
call raises, the same calls and `finish` run from the frame's locals.

A check that ran before the call (`check_threads`) or after it (`check_returned`: hooks,
callbacks, forks, the stream) runs code this has just found unaltered.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

from solforge.harness import hold, protocol, signals
from solforge.harness.identities import identity_changes

# The order of the fields of `bindings`' tuple, for the frames that unpack it.
FIELDS = ("disarm", "expected", "parts", "classes", "block", "hold", "check", "state",
          "getattr", "write", "leave", "read", "code", "mark")


def disarm() -> tuple[tuple[tuple[Any, ...], ...], tuple[Any, ...]]:
    """(calls, what each but the first should return) for the first thing a call's frame does
    after the return, in C and on values it loaded before the call (`Worker._run`):
    `tuple(starmap(operator.call, calls))` takes the time, reads the trace and profile
    functions, clears them, swaps PyTorch's frame-evaluation callback for none (it returns the
    one it replaced) and reads the `sys.monitoring` tools. A call made from C to C starts no
    frame and raises no event, so no function of the candidate's runs between those reads and
    `finish`, which a trace function could otherwise rewrite the arguments of: up to Python
    3.12 the interpreter writes a traced frame's `f_locals` back after each trace event."""
    calls: list[tuple[Any, ...]] = [(time.perf_counter,), (sys.gettrace,), (sys.getprofile,),
                                    (sys.settrace, None), (sys.setprofile, None)]
    expected: list[Any] = [sys.gettrace(), sys.getprofile(), None, None]
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback, set_eval_frame
        calls.append((set_eval_frame, None))
        expected.append(get_eval_frame_callback())
    except ImportError:  # a PyTorch build without it
        pass
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        calls += [(monitoring.get_tool, tool) for tool in range(6)]
        expected += [monitoring.get_tool(tool) for tool in range(6)]
    return tuple(calls), tuple(expected)


def parts() -> tuple[tuple[str, Any, str, Any], ...]:
    """(label, object, attribute, value now) of what runs between a return and the identity
    check, and of the check itself."""
    sigmask = signals.SIGMASK
    watched = (("signals.block", signals.block, "__code__"),
               ("signals.block", signals.block, "__defaults__"),
               ("hold.hold", hold.hold, "__code__"), ("hold.hold", hold.hold, "__defaults__"),
               ("identity_changes", identity_changes, "__code__"),
               ("identity_changes", identity_changes, "__defaults__"),
               ("signals.SIGMASK", sigmask, "errcheck"), ("signals.SIGMASK", sigmask, "restype"),
               ("signals.SIGMASK", sigmask, "argtypes"))
    return tuple((f"{label}.{name}", owner, name, getattr(owner, name))
                 for label, owner, name in watched)


def classes() -> tuple[tuple[str, Any, frozenset[str]], ...]:
    """(label, namespace, names) of the ctypes classes `signals.block` calls: a `__call__` or a
    `__getattribute__` added to one would run before the identity check. The namespace is the
    class's live mapping proxy, read without an attribute lookup on the class."""
    return tuple((label, vars(cls), frozenset(vars(cls))) for label, cls in
                 (("the libc function's class", type(signals.SIGMASK)),
                  ("the signal set's class", signals._SIGSET)))


def bindings(state: tuple[Any, ...], taken: tuple[Any, ...]) -> tuple[Any, ...]:
    """The tuple a checking frame unpacks (FIELDS): `taken` is (*disarm(), parts(), classes())
    from before the candidate existed; `state` the identity snapshot's state now."""
    return (*taken, signals.block, hold.hold, identity_changes, state, getattr, os.write,
            os._exit, object.__getattribute__, protocol.TAMPERED_EXIT,
            protocol.TAMPERED_MARK)


def finish(worker: Any, root: tuple[Any, ...], collector_was_off: bool, result: Any,
           seen: tuple[Any, ...], _zip=zip, _collecting=gc.isenabled,
           _settrace=sys.settrace, _setprofile=sys.setprofile) -> tuple[Any, float]:
    """A call's result (None after a raise) and the moment it returned, once the check above passed
    (else the process ends here). `seen` is what `disarm`'s calls returned the moment the call
    returned: the time, then the hooks. Called with no trace or profile function left (`disarm`
    cleared them), so its arguments are what the calling frame loaded before the call. Only then
    are the worker's attributes touched. A tracer the harness itself ran under (one set before
    the snapshot) is set again before the identity check, which compares the hooks too."""
    (_, expected, parts, classes, block, hold_others, check, state, get, write, leave, read, code,
     mark) = root
    found = []
    for now, then in _zip(seen[1:], expected):
        if now is not then:
            found.append("a trace, profile, frame-evaluation or monitoring hook")
            break
    if collector_was_off and _collecting():  # a collection runs the candidate's finalizers
        found.append("the garbage collector turned back on")
    if not found:  # a tracer the harness itself ran under, set again before the check reads it
        if expected[0] is not None:
            _settrace(expected[0])
        if expected[1] is not None:
            _setprofile(expected[1])
    if not found:
        found = [label for label, names, then in classes if names.keys() != then]
    if not found:
        found = [label for label, owner, name, then in parts if get(owner, name, mark) is not then]
    if not found:
        unblocked = block()  # first: no handler may run after it
        interval = hold_others()  # no other Python thread runs until the copy
        try:
            found = check(state)
            if read(worker, "root") is not root:
                found.append("the worker's bound check")
        except BaseException:
            found = ["the identity check raised"]
    if found:
        write(2, f"{mark} at a return: {'; '.join(found[:8])}\n".encode()[:2000])
        leave(code)
    worker.signals_unblocked = unblocked
    worker.held.keep(interval)
    worker.collector_turned_on = False
    return result, seen[0]
