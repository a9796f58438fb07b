"""A count of the changes to the namespaces the identity check compares, kept by CPython itself.

The worker compares every watched name with its snapshot the moment each call returns
(identities.py, return_check.py): about 5,800 lookups, 0.57 ms of a 1.55 ms check per timed
call on an H100 alone (benchmarks/guard_cost.py, 2026-12-06; with six units side by side the
worker's checks took about three times as long per call), all of it inside the GPU's exclusive
hold. Nearly always nothing changed. From
Python 3.12, CPython calls a dict watcher (`PyDict_AddWatcher`, `PyDict_Watch`) on every change
to a watched dict, whichever way it is made (`setattr` on a module or a class, its `__dict__`
item by item, `update`, `clear`, deletion), before it happens. One watcher over the namespaces
of one snapshot counts the changes that could matter:
- a watched name bound to another object, or deleted;
- any name added or deleted (the check also looks for names added to a namespace);
- a namespace cleared, replaced wholesale or freed.
A name the check does not watch rebound in place (a module's counter, a flag the profiler
sets) is not counted. The identity check then compares the names only when the count moved
since its last comparison that found nothing, and otherwise knows, without looking, that no
watched name changed.

The count is an `itertools.count` that only the callback advances: from Python it can only be
advanced further (which makes the check compare, as before), never set back. The count last
compared lives in raw memory (`PyMem_RawCalloc`), read through a read-only `memoryview` and
written by the check through `ctypes` (were that write made to fail, the check would compare
every time, as before); no Python object lets a candidate set it without `ctypes`, which reaches
any memory of the process and is out of the guards' reach anyway (tests/exploits/README.md). The
callback is a Python function, watched like the harness's own (its code and defaults cannot
change: identities.install_tamper_hook), and reads only its immutable defaults. Where dict
watchers are missing (Python before 3.12) or their slots are taken, `watch` returns None and the
check compares every name at every return, as before.

This module imports nothing but the standard library (its test loads it in a Python that has
no PyTorch).
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import sys
from collections.abc import Iterable
from typing import Any

MODIFIED = 1  # PyDict_WatchEvent: ADDED 0, MODIFIED 1, DELETED 2, CLONED, CLEARED, DEALLOCATED
_EVENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p)


def available() -> bool:
    """Whether this interpreter has dict watchers (CPython 3.12 and later)."""
    return (sys.version_info >= (3, 12) and sys.implementation.name == "cpython"
            and hasattr(ctypes.pythonapi, "PyDict_AddWatcher"))


def changes_of(gate: tuple[Any, ...], _repr=repr, _int=int) -> int:
    """The changes counted so far (the count's own repr: `count(N)`)."""
    return _int(_repr(gate[0])[6:-1])


def compared_of(gate: tuple[Any, ...]) -> int:
    """The changes counted when the check last compared and found nothing."""
    return gate[1][0]


def set_compared(gate: tuple[Any, ...], changes: int,
                 _word=ctypes.c_long.from_address) -> None:
    _word(gate[2]).value = changes


def watch(namespaces: Iterable[tuple[dict[Any, Any], Iterable[str]]]) -> tuple[Any, ...] | None:
    """A watcher over each (namespace, watched names): the gate `(changes, compared, address,
    keep)`: the count of changes, a read-only view of the count last compared (0) and its
    address, and what must stay alive (the ctypes callback, the Python function it runs, each
    namespace with the key objects it held); None where dict watchers are missing or none is
    free."""
    if not available():
        return None
    namespaces = [(names, frozenset(watched)) for names, watched in namespaces]
    api = ctypes.pythonapi
    api.PyMem_RawCalloc.restype = ctypes.c_void_p
    api.PyMem_RawCalloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
    address = api.PyMem_RawCalloc(1, ctypes.sizeof(ctypes.c_long))
    if not address:
        return None
    changes = itertools.count()
    # The names not watched, by the addresses of the key objects each namespace holds now (kept
    # alive below, so no other object takes an address): rebinding one of them in place is not
    # counted. A name rebound through another string object equal to it is counted (the check
    # then compares, and finds nothing).
    keys = tuple((names, tuple(names)) for names, _ in namespaces)
    skipped = frozenset((id(names), id(key)) for (names, chosen), (_, held)
                        in zip(namespaces, keys) for key in held if key not in chosen)
    function = _counter(skipped, changes)
    callback = _EVENT(function)
    api.PyDict_AddWatcher.restype = ctypes.c_int
    api.PyDict_AddWatcher.argtypes = (_EVENT,)
    api.PyDict_Watch.restype = ctypes.c_int
    api.PyDict_Watch.argtypes = (ctypes.c_int, ctypes.py_object)
    api.PyDict_ClearWatcher.restype = ctypes.c_int
    api.PyDict_ClearWatcher.argtypes = (ctypes.c_int,)
    try:  # pythonapi raises what CPython set: no slot free (PyTorch's Dynamo uses some)
        watcher = api.PyDict_AddWatcher(callback)
    except Exception:
        return None
    # Never freed while a watched dict may still call it (the interpreter's teardown frees the
    # namespaces after the objects that held the callback), and cleared before that teardown.
    api.Py_IncRef(ctypes.py_object(callback))
    atexit.register(api.PyDict_ClearWatcher, watcher)
    try:
        for names, _ in namespaces:
            api.PyDict_Watch(watcher, names)
    except Exception:
        return None
    return make_gate(changes, address, (callback, function, keys))


def make_gate(changes: Any, address: int, keep: tuple[Any, ...]) -> tuple[Any, ...]:
    """The gate's tuple: the count of changes, a read-only view of the word at `address` (the
    count last compared), that address, and `keep`."""
    word = (ctypes.c_long * 1).from_address(address)
    return changes, memoryview(word).cast("B").cast("l").toreadonly(), address, keep


def _counter(skipped: frozenset[tuple[int, int]], changes: Any) -> Any:
    """The watcher: counts every event but a name in `skipped` rebound. It runs inside every
    change of a watched namespace, the candidate's too, so it makes no call but to builtins
    bound now: the key comes as its address, never as an object whose `__eq__` or `__hash__`
    (a `str` subclass) could run."""
    def counted(event: int, names: int, key: int | None, value: int | None,
                _skipped: frozenset[tuple[int, int]] = skipped, _changes: Any = changes,
                _modified: int = MODIFIED, _next=next) -> int:
        if event != _modified or (names, key) not in _skipped:
            _next(_changes)
        return 0

    return counted
