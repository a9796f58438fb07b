"""An audit hook that ends the worker when anything but the harness sets a trace or profile
function.

A candidate's code can run in the worker after a call's check has passed, with no name or
function of the harness changed: a weakref callback of an object the harness drops, a `str`
subclass planted as a key of a module's namespace (its `__eq__` runs on every lookup of the
name it collides with), a finalizer. The records that decide a verdict are kept where such
code cannot change them in place (tuples held in the timing frames' locals, the return's time
on the stack); to rebind one of those locals it would need a trace or profile function: up to
Python 3.12 the interpreter writes a traced frame's `f_locals` back after each event. Setting
either is an audited event (`sys.settrace`, `sys.setprofile`, and their all-threads forms),
announced before it takes effect.

The harness sets them itself in two places only: `return_check.disarm`, called from the frame
of `Worker._run` (it clears whatever the call left), and `return_check.finish` (a tracer the
harness itself ran under, set again). So an event is the harness's own when the frame that
made it runs one of those two codes and every frame below it runs code of the harness's (the
worker's modules, and the frames that started it). Anything else ends the process with
`protocol.TAMPERED_EXIT` before the function is set: a frame of the candidate's in the chain,
a function made from the harness's code by the candidate (its caller is the candidate's), or
a weakref finalizer (`weakref.finalize.__call__` is not the harness's). A thread started
under `threading.settrace` sets its trace function in `Thread._bootstrap_inner`: that one is
allowed too, for a thread only traces itself.

The hook reads only its defaults (immutable) and the frames, and is watched by the tamper
hook like every harness function (its code or defaults replaced ends the process).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from types import CodeType, FunctionType, ModuleType
from typing import Any

from solforge.harness import protocol

EVENTS = frozenset({"sys.settrace", "sys.setprofile", "sys._settraceallthreads",
                    "sys._setprofileallthreads"})
# Modules whose code may sit below the harness's own frames: the interpreter's module runner
# and the threading bootstrap.
STARTERS = ("runpy", "threading")


def codes_of(modules: Iterable[ModuleType]) -> set[CodeType]:
    """Every code object defined in the modules: their functions, their classes' methods
    (static, class and property ones too) and the code nested in those (comprehensions on
    Python 3.11, inner functions)."""
    found: set[CodeType] = set()
    for module in modules:
        for value in list(vars(module).values()):
            for function in _functions(value, module):
                _add(function.__code__, found)
    return found


def _functions(value: Any, module: ModuleType) -> list[FunctionType]:
    if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
        return [f for member in list(vars(value).values()) for f in _unwrapped(member)]
    return _unwrapped(value)


def _unwrapped(value: Any) -> list[FunctionType]:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, FunctionType)]
    return [value] if isinstance(value, FunctionType) else []


def _add(code: CodeType, found: set[CodeType]) -> None:
    if code in found:
        return
    found.add(code)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _add(const, found)


def stack_codes() -> set[CodeType]:
    """The code of every frame below this call: whatever started the worker (a `<module>`
    frame's code belongs to no function)."""
    codes = set()
    frame = sys._getframe(1)
    while frame is not None:
        codes.add(frame.f_code)
        frame = frame.f_back
    return codes


def harness_codes(module_names: Iterable[str]) -> frozenset[CodeType]:
    """The codes a harness frame may run: those of the named modules (the worker's solforge
    modules), of the starters, and of the frames below the caller."""
    modules = [sys.modules[name] for name in (*module_names, *STARTERS) if name in sys.modules]
    return frozenset(codes_of(modules) | stack_codes())


def install(setters: Iterable[CodeType], harness: frozenset[CodeType]) -> FunctionType:
    """Add the hook; `setters` are the codes of the harness's frames that set trace and profile
    functions (`Worker._run`, `return_check.finish`), `harness` every code allowed below them.
    Returns the hook (for the tamper hook's watch)."""
    bootstrap = threading.Thread._bootstrap_inner.__code__
    ids = frozenset(id(code) for code in harness)

    def hook(event: str, args: tuple, _events: frozenset[str] = EVENTS,
             _setters: frozenset[int] = frozenset(), _harness: frozenset[int] = frozenset(),
             _keep: tuple[CodeType, ...] = (), _bootstrap: int = 0, _frame=sys._getframe,
             _id=id, _write=os.write, _exit=os._exit, _code: int = protocol.TAMPERED_EXIT,
             _line: bytes = b"") -> None:
        if event not in _events:
            return
        frame = _frame(1)
        first = _id(frame.f_code)
        if first not in _setters and first != _bootstrap:
            _write(2, _line)
            _exit(_code)
        while frame is not None:
            if _id(frame.f_code) not in _harness:
                _write(2, _line)
                _exit(_code)
            frame = frame.f_back

    line = (f"{protocol.TAMPERED_MARK} a trace or profile function set by code other than "
            f"the harness's\n").encode()
    # `_keep` holds the codes, so that no id here is ever another object's
    hook.__defaults__ = (EVENTS, frozenset(id(code) for code in setters), ids,
                         (*harness, *setters, bootstrap), id(bootstrap), sys._getframe, id,
                         os.write, os._exit, protocol.TAMPERED_EXIT, line)
    sys.addaudithook(hook)
    return hook
