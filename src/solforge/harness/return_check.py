"""What the worker binds before each call of the candidate to check, the moment it returns,
that nothing the harness runs next was altered during it.

Every check the harness runs after a call is Python, and a candidate that shares the process
can alter what runs: rebind a name the check looks up (`builtins.any`), replace a method on
the way to it (`Worker._verify`), or give a function another `__code__`; an alteration that
restores itself once it has run leaves nothing for a later check to find. What cannot be
altered from Python is a frame that is already running: its code, and (up to Python 3.12) its
local variables, short of a trace function set on that very frame (the interpreter writes a
traced frame's `f_locals` back after each trace event: tests/exploits/README.md lists it among
the openings left). So the frame that called the candidate (`Worker.call`, and `Worker.start`
around the import) holds, as locals bound before the call, the tuple built here, and after
the return it runs, in its own code:
0. a comparison of the hooks that would run a function of the candidate's on the next frame
   the harness enters (trace, profile, frame evaluation, `sys.monitoring`) and of the
   collector's state (a collection runs callbacks and finalizers) with what they were, through
   builtins that start no frame;
1. a comparison of the few objects it calls next with what they were (`parts`: the code and
   defaults of `signals.block`, `hold.hold` and `identities.identity_changes`, the attributes
   of the libc function `block` calls; `classes`: the names of the ctypes classes it calls);
2. `block`, `hold` (the signals and the other threads held off, as before);
3. `identity_changes` over the snapshot's state: every watched name, function, module and
   pinned object (identities.py);
and if anything differs it writes one line to stderr and ends the process with
`protocol.TAMPERED_EXIT`, through `os.write` and `os._exit` bound here: whatever would report
it the usual way may be what was altered. Only after that does the worker touch an attribute
of any object (an attribute store could run a `__setattr__` the call added to a class).

A check that ran before the call (`check_threads`) or after it (`check_returned`: hooks,
callbacks, forks, the stream) runs code this has just found unaltered.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from solforge.harness import hold, protocol, signals
from solforge.harness.identities import identity_changes

# The order of the fields of `bindings`' tuple, for the frames that unpack it.
FIELDS = ("hooks", "parts", "classes", "block", "hold", "check", "state", "getattr", "write",
          "leave", "read", "code", "mark")


def hooks() -> tuple[tuple[Any, tuple[int, ...], Any], ...]:
    """(reader, its arguments, value now) of every hook that would run a Python function of the
    candidate's on the next frame the harness enters: the trace and profile functions,
    PyTorch's frame-evaluation callback, the `sys.monitoring` tools (Python 3.12 and later).
    Every reader is a builtin (no partial: its `__setstate__` could change what it calls):
    reading them starts no frame. The frames that check compare these first."""
    readers: list[tuple[Any, tuple[int, ...]]] = [(sys.gettrace, ()), (sys.getprofile, ())]
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        readers.append((get_eval_frame_callback, ()))
    except ImportError:  # a PyTorch build without it
        pass
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        readers += [(monitoring.get_tool, (tool,)) for tool in range(6)]
    return tuple((read, args, read(*args)) for read, args in readers)


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
    """The tuple a checking frame unpacks (FIELDS): `taken` is (hooks(), parts(), classes())
    from before the candidate existed; `state` the identity snapshot's state now."""
    return (*taken, signals.block, hold.hold, identity_changes, state, getattr, os.write,
            os._exit, object.__getattribute__, protocol.TAMPERED_EXIT,
            protocol.TAMPERED_MARK)
