"""What every watched name is bound to, and what every watched function runs, compared later.

A candidate shares its process with the harness, so it can rebind any name the measurement
looks up (`time.perf_counter = ...`), change what a function does without rebinding it (a new
`__code__`, `__defaults__` or closure cell: the function keeps its identity), change a harness
constant, or blind the check itself (rebind a builtin it calls, the tuples it reads, or its own
`__code__`). The snapshot is taken before the candidate exists; `identity_changes` compares:
- every callable of the watched modules and classes, and every name of solforge's own modules
  (constants too: a timing rule or a guard's allowance), by identity (`is`);
- every watched Python function's code, defaults, keyword defaults and closure cells (and the
  functions those cells hold, such as a decorator's wrapped function): a new code or defaults
  ends the process as it is set (`install_tamper_hook`, an audit hook), the rest is compared;
- the set of names of each watched class (a `__getattribute__` added to one changes what its
  old names do), `sys.modules` entries, each watched module's type, the trace hooks, and the
  state of the harness's pinned objects.

`identity_changes` reads nothing but its arguments: its state is one immutable tuple
(`IdentitySnapshot.state`), every builtin it calls is bound as a default when this module is
imported, before any candidate, and it calls no Python function before it has compared every
watched function's closure and keyword defaults (their code and defaults cannot change
unseen: `install_tamper_hook`). The worker calls it from the frame that called the candidate,
with the state, the function, its code and its defaults all bound before the call
(return_check.py: a running frame's code and stack are out of a candidate's reach from
Python).
"""

from __future__ import annotations

import builtins
import gc
import importlib
import operator
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import CellType, FunctionType, MappingProxyType, ModuleType
from typing import Any

import torch

from solforge.harness import dict_watch, protocol

WATCHED_MODULES = (
    "time", "os", "io", "select", "struct", "json", "hmac", "hashlib", "secrets", "math",
    "builtins", "threading", "signal", "operator", "itertools",
    "torch", "torch.cuda", "torch.profiler", "torch.autograd.profiler", "torch.library",
    "torch.overrides", "torch._ops", "torch.cuda._utils",
    "solforge.measure.timing", "solforge.measure.clocks",
    "solforge.harness.channel", "solforge.harness.area", "solforge.harness.handover",
    "solforge.harness.vmm",
    "solforge.harness.guards", "solforge.harness.worker", "solforge.harness.protocol",
    "solforge.problem.outputs",
)
# Watched classes whose set of names is not compared, only the names they had: libraries a
# candidate may import add methods to them (to `torch.Tensor` above all).
OPEN_CLASSES = frozenset({"torch.Tensor", "torch._C.TensorBase", "threading.Thread"})
# Globals of solforge's modules that the harness itself rebinds while it runs (each with a
# `global` statement; a test holds this list to the sources): not compared.
REBOUND = frozenset({
    "solforge.harness.handover._ARENAS", "solforge.harness.vmm._LIBCUDA",
    "solforge.harness.pool._SHARED", "solforge.harness.sandbox.driver._holders",
    "solforge.harness.sandbox.driver._was_dumpable", "solforge.hgemm.dispatch._active",
    "solforge.hgemm.kernels.wgmma._loaded", "solforge.hgemm.kernels.wgmma._failure",
})
# Names the standard library caches on a class in honest use: copyreg keeps a class's slot
# names there the first time one of its objects is copied or pickled (torch.compile copies ops).
CACHED_CLASS_NAMES = frozenset({"__slotnames__"})
HARNESS_PREFIX = "solforge."
BUILTIN_NAMES = frozenset(vars(builtins))
# Functions held in closure cells are followed this deep (a decorator's wrapper holds the
# function it wraps, which may be a wrapper itself).
CELL_DEPTH = 3


def harness_modules() -> list[str]:
    """Every solforge module loaded before the candidate: whatever of the harness runs in the
    worker (the shared area's `write` hands outputs over after the timed window; a replaced one
    could compute them there)."""
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith(HARNESS_PREFIX) and isinstance(module, ModuleType))


def watched_classes() -> dict[str, type]:
    """The classes whose methods the measurement calls. The profiler's own result classes are
    among them: the GPU timer reads each kernel's start and end from `_KinetoEvent` records, a
    pybind class whose methods Python can reassign (`start_ns = lambda self: ...` would shrink
    every kernel). So are the classes a call's return path runs through: a device context
    (`torch.cuda.synchronize`) and an op's Python wrapper (the profiler's range ops)."""
    from torch.autograd import profiler as autograd_profiler
    from torch.profiler import profile
    from torch.profiler import profiler as kineto_profiler
    from torch.utils._device import DeviceContext

    classes = {"torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
               "torch.cuda.Event": torch.cuda.Event,
               "torch.cuda.Stream": torch.cuda.Stream,
               "torch.cuda.CUDAGraph": torch.cuda.CUDAGraph,
               "torch.cuda.device": torch.cuda.device,
               "torch.profiler.profile": profile,
               "record_function": autograd_profiler.record_function,
               "torch.autograd.profiler.profile": autograd_profiler.profile,
               "threading.Thread": threading.Thread, "DeviceContext": DeviceContext}
    for label, owner, name in (("_KinetoProfile", kineto_profiler, "_KinetoProfile"),
                               ("_ProfilerResult", torch._C._autograd, "_ProfilerResult"),
                               ("_KinetoEvent", torch._C._autograd, "_KinetoEvent"),
                               ("OpOverloadPacket", torch._ops, "OpOverloadPacket"),
                               ("OpOverload", torch._ops, "OpOverload"),
                               ("_OpNamespace", torch._ops, "_OpNamespace")):
        found = getattr(owner, name, None)  # private: present in the PyTorch builds we run
        if isinstance(found, type):
            classes[label] = found
    return classes


@dataclass(frozen=True, slots=True)  # no instance dict: no attribute can shadow `changed`
class Namespace:
    """The watched names of one module or class: its namespace (a module's `__dict__` and a
    class's mapping proxy are live views that cannot be replaced) and what each name held."""

    label: str
    names: Mapping[str, Any]  # vars(owner), live
    attributes: tuple[str, ...]
    values: tuple[Any, ...]

    def changed(self) -> list[str]:
        """The names bound to another object now (a missing name reads None)."""
        now = tuple(map(self.names.get, self.attributes))
        if not any(map(operator.is_not, now, self.values)):
            return []
        return [f"{self.label}.{a}" for a, v, w in zip(self.attributes, now, self.values)
                if v is not w]


def _flat(namespaces: Iterable[Namespace], kind: type) -> tuple[Any, ...]:
    """Every watched name of the namespaces of one mapping type, in one sequence: (the type's
    `get`, each name's namespace, the names, what each held, their labels). A check follows
    every call, and one pass of `map` over the few thousand names (lookups and identity tests
    in C) took 0.19 ms where a Python call per namespace took 0.31 (239 namespaces, about 4,700
    names, on a 2-core CPU). The type's `get`, not the instance's: no attribute of a mapping
    answers for it."""
    picked = [n for n in namespaces if type(n.names) is kind]
    return (kind.get, tuple(n.names for n in picked for _ in n.attributes),
            tuple(a for n in picked for a in n.attributes),
            tuple(v for n in picked for v in n.values),
            tuple(f"{n.label}.{a}" for n in picked for a in n.attributes))


def _functions_of(value: Any) -> list[FunctionType]:
    """The Python functions a watched value runs: itself, or those a staticmethod,
    classmethod or property wraps."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, FunctionType)]
    return [value] if isinstance(value, FunctionType) else []


def _functions(namespaces: Iterable[Namespace]) -> dict[int, tuple[str, FunctionType]]:
    """Every watched Python function once (by id), with a label, and the functions their
    closure cells hold (CELL_DEPTH deep)."""
    found: dict[int, tuple[str, FunctionType]] = {}
    todo = [(f"{n.label}.{a}", f) for n in namespaces for a, v in zip(n.attributes, n.values)
            for f in _functions_of(v)]
    for _ in range(CELL_DEPTH + 1):
        held = []
        for label, function in todo:
            if id(function) in found:
                continue
            found[id(function)] = (label, function)
            for index, cell in enumerate(function.__closure__ or ()):
                content = _content(cell)
                if isinstance(content, FunctionType):
                    held.append((f"{label} (closure {index})", content))
        todo = held
    return found


def _content(cell: CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY


_EMPTY = object()
_MISSING = object()


def _function_state(functions: Iterable[tuple[str, FunctionType]]) -> tuple[Any, ...]:
    """(functions, codes, defaults, labels), (functions with keyword defaults: each with its
    dict, keys and values), (cells, contents, labels). Only the cells that hold something
    callable (a wrapped function, a bound method, a class): a cell that holds a counter or a
    cache is one its function may rebind (`nonlocal`) in honest use."""
    functions = list(functions)
    plain = (tuple(f for _, f in functions), tuple(f.__code__ for _, f in functions),
             tuple(f.__defaults__ for _, f in functions), tuple(label for label, _ in functions))
    keywords = tuple((f, kw, tuple(kw), tuple(kw.values()), label) for label, f in functions
                     if (kw := f.__kwdefaults__))
    cells = [(cell, content, f"{label} (closure {i})") for label, f in functions
             for i, cell in enumerate(f.__closure__ or ())
             if callable(content := _content(cell)) and content is not _EMPTY]
    return plain, keywords, (tuple(c for c, _, _ in cells), tuple(v for _, v, _ in cells),
                             tuple(label for _, _, label in cells))


def _hook_readers() -> tuple[Any, ...]:
    """The functions that say which trace, profile and frame-evaluation hooks are set: each
    runs a Python function of the candidate's on the harness's own frames. (PyTorch's
    frame-evaluation callback is what torch.compile sets while a compiled function runs, and
    restores when it returns.)"""
    readers = [sys.gettrace, sys.getprofile, threading.gettrace, threading.getprofile]
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        readers.append(get_eval_frame_callback)
    except ImportError:  # a PyTorch build without it
        pass
    return tuple(readers)


class IdentitySnapshot:
    """The objects bound to every watched name and what every watched function runs, to be
    compared by `identity_changes` later; also the type of every watched module and pinned
    object: a module's `__class__` can be set to a subclass whose `__getattribute__` answers
    `time.perf_counter` with something else while the module's namespace still holds the
    original."""

    def __init__(self, module_names: Iterable[str] = WATCHED_MODULES) -> None:
        modules = {}
        for name in module_names:
            try:
                modules[name] = importlib.import_module(name)
            except ImportError:  # a private module this PyTorch build lacks
                continue
        self.namespaces: list[Namespace] = []
        for name, module in modules.items():
            self._take(name, module)
        for name, cls in watched_classes().items():
            self._take(name, cls)
        self.pinned: tuple[tuple[Any, ...], ...] = ()
        self._static = (
            tuple(_flat(self.namespaces, kind) for kind in (dict, MappingProxyType)),
            _function_state(_functions(self.namespaces).values()),
            # every name of each watched class, not only its callables: a name added later (a
            # `__getattribute__` given to the guards' class) changes what the old ones do. Not
            # the classes other libraries may extend when a candidate imports them.
            tuple((n.label, n.names, frozenset(n.names)) for n in self.namespaces
                  if type(n.names) is MappingProxyType and n.label not in OPEN_CLASSES),
            tuple(n for n in self.namespaces  # none in practice
                  if type(n.names) not in (dict, MappingProxyType)),
            (sys.modules, tuple((name, module, type(module)) for name, module in modules.items())),
            # every module's names, for the names added later: in solforge's modules any (but
            # submodules and dunders), elsewhere one that shadows a builtin (a global `any`
            # added to a module changes what every function of it calls)
            tuple((name, vars(module), frozenset(vars(module)), name.startswith(HARNESS_PREFIX))
                  for name, module in modules.items()),
            (readers := _hook_readers(), tuple(read() for read in readers)),
            # CPython's count of changes to these namespaces, where it keeps one: a return
            # then compares the names only when it moved (dict_watch.py)
            dict_watch.watch(_namespace_dicts(self.namespaces)),
        )
        self.state = (*self._static, self.pinned)

    def _take(self, label: str, owner: ModuleType | type) -> None:
        watched = {}
        every_name = isinstance(owner, ModuleType) and label.startswith(HARNESS_PREFIX)
        for attribute, value in list(vars(owner).items()):
            if (callable(value) or isinstance(value, (staticmethod, classmethod, property))
                    or (every_name and not attribute.startswith("__")
                        and f"{label}.{attribute}" not in REBOUND)):
                watched[attribute] = value
            if isinstance(owner, ModuleType) and _defined_by_harness(value, owner):
                self._take(f"{label}.{attribute}", value)  # the harness's own classes' methods
        self.namespaces.append(Namespace(label, vars(owner), tuple(watched),
                                         tuple(watched.values())))

    def pin(self, label: str, instance: object, mutable: Iterable[str] = ()) -> None:
        """Watch an object of the harness: its type, and every attribute but `mutable`
        (counters) must keep its identity, and none may be added or removed."""
        mutable = frozenset(mutable)
        state = {k: v for k, v in vars(instance).items() if k not in mutable}
        entry = (label, instance, type(instance), tuple(state), tuple(state.values()), mutable)
        self.pinned = (*(p for p in self.pinned if p[0] != label), entry)
        self.state = (*self._static, self.pinned)

    def unpin(self, label: str) -> None:
        self.pinned = tuple(p for p in self.pinned if p[0] != label)
        self.state = (*self._static, self.pinned)

    def changed(self) -> list[str]:
        """What `identity_changes` finds now, every name compared whatever the count of
        changes says (its state read with object's lookup, never through a
        `__getattribute__` given to this class, which the check reports)."""
        state = object.__getattribute__(self, "state")
        return identity_changes((*state[:-2], None, state[-1]))

    def gate(self) -> tuple[Any, ...] | None:
        """The count of changes the check at a return reads (dict_watch.py), if any."""
        return self.state[-2]

    def watched_names(self) -> int:
        return sum(len(flat[2]) for flat in self.state[0])

    def watched_functions(self) -> int:
        return len(self.state[1][0][0])


def _namespace_dicts(namespaces: Iterable[Namespace]) -> list[tuple[dict[Any, Any], set[str]]]:
    """Each namespace's own dict (a class's, behind its mapping proxy) with its watched names,
    one entry a dict."""
    found: dict[int, tuple[dict[Any, Any], set[str]]] = {}
    for namespace in namespaces:
        names = namespace.names
        if type(names) is MappingProxyType:
            names = next((d for d in gc.get_referents(names) if type(d) is dict), None)
        if type(names) is dict:
            found.setdefault(id(names), (names, set()))[1].update(namespace.attributes)
    return list(found.values())


def _defined_by_harness(value: Any, module: ModuleType) -> bool:
    return (isinstance(value, type) and value.__module__ == module.__name__
            and module.__name__.startswith(HARNESS_PREFIX))


def identity_changes(state: tuple[Any, ...], _any=any, _map=map, _zip=zip, _tuple=tuple,
                     _type=type, _vars=vars, _sorted=sorted, _dict=dict,
                     _is_not=operator.is_not, _keywords=operator.attrgetter("__kwdefaults__"),
                     _contents=operator.attrgetter("cell_contents"), _missing=_MISSING,
                     _cached=CACHED_CLASS_NAMES, _str=str, _module=ModuleType,
                     _builtin_names=BUILTIN_NAMES, _changes=dict_watch.changes_of,
                     _compared=dict_watch.compared_of, _set_compared=dict_watch.set_compared
                     ) -> list[str]:
    """What changed since the snapshot whose `state` this is, as labels (none: []). Functions
    first: until they are known to run what they ran, nothing here calls one. A new code or
    defaults ends the process the moment it is set (`install_tamper_hook`); what no audit event
    announces is compared here: keyword defaults changed in place, closure cells. Every builtin
    is a default bound at import (a rebound `builtins.any` would answer for a check that looked
    it up). An emptied closure cell raises ValueError: the caller treats an exception as a
    change."""
    flats, functions, class_names, others, modules, module_names, hooks, gate, pinned = state
    _, keywords, (cells, contents, cell_labels) = functions
    found = []
    for f, kw, keys, values, label in keywords:
        now = _keywords(f)
        if now is not kw or _tuple(now) != keys or _any(_map(_is_not, now.values(), values)):
            found.append(f"{label} (keyword defaults)")
    if _any(_map(_is_not, _map(_contents, cells), contents)):
        found += [label for cell, content, label in _zip(cells, contents, cell_labels)
                  if cell.cell_contents is not content]
    if found:
        return found  # what the rest would call may be what changed
    # The names, unless CPython counted no change to their namespaces since the last
    # comparison that found none (dict_watch.py; the functions above are the harness's own).
    counted = _changes(gate) if gate is not None else None
    compare = gate is None or counted != _compared(gate)
    added = []
    for get, mappings, attributes, values, names in flats if compare else ():
        if _any(_map(_is_not, _map(get, mappings, attributes), values)):
            found += [label for label, names_now, attribute, value
                      in _zip(names, mappings, attributes, values)
                      if get(names_now, attribute) is not value]
    if compare:
        added = [f"{label}.{name} (added)" for label, names, then in class_names
                 if names.keys() != then for name in _sorted(names.keys() - then)
                 if name not in _cached]
        for label, names, then, strict in module_names:
            if names.keys() != then:
                added += [f"{label}.{name} (added)" for name in names.keys() - then
                          if _type(name) is not _str or name in _builtin_names
                          or (strict and not name.startswith("__")
                              and _type(names[name]) is not _module)]
    found += added
    found += [label for namespace in others for label in namespace.changed()]
    loaded, watched = modules
    found += [f"sys.modules[{name!r}]" for name, module, _ in watched
              if loaded.get(name) is not module]
    found += [f"type({name})" for name, module, kind in watched if _type(module) is not kind]
    readers, then = hooks
    if added:
        return found  # a class given new names may run them on the reads below
    if _any(_map(_is_not, (read() for read in readers), then)):
        found.append("sys.settrace/sys.setprofile/threading hooks or torch's frame evaluation "
                     "callback")
    for label, instance, kind, keys, values, mutable in pinned:
        if _type(instance) is not kind:
            found.append(f"type({label})")
        now = {k: v for k, v in _vars(instance).items() if k not in mutable}
        then = _dict(_zip(keys, values))
        found += [f"{label}.{k}" for k in now.keys() | then.keys()
                  if now.get(k, _missing) is not then.get(k, _missing)]
    if compare and gate is not None and not found:
        _set_compared(gate, counted)
    return found


def function_changes(state: tuple[Any, ...]) -> list[str]:
    """The watched functions whose code or defaults are not the snapshot's: what
    `install_tamper_hook` stops as it happens, compared again where a check can afford it
    (after the import, each correctness round and each timed loop: each function's attributes
    are audited reads, about 0.8 ms for the 1,800 of them on a 2-core CPU)."""
    funcs, codes, defaults, labels = state[1][0]
    return [label for f, code, default, label in zip(funcs, codes, defaults, labels)
            if f.__code__ is not code or f.__defaults__ is not default]


def install_tamper_hook(snapshot: IdentitySnapshot, also: Iterable[FunctionType] = ()) -> None:
    """An audit hook that ends the process (protocol.TAMPERED_EXIT, a line on stderr) the
    moment a watched function, or the hook itself, is given a new `__code__`, `__defaults__` or
    `__kwdefaults__`: CPython announces each as an `object.__setattr__` event before it
    happens, and a hook cannot be removed. A change that restores itself once it has run, or
    one made to the check itself, would leave nothing for a later comparison to find. The hook
    reads only its defaults (immutable, its own among the watched), and no attribute of any
    object but a tuple's items. `also`: functions watched beyond the snapshot's (the harness's
    other audit hooks, which no module's namespace holds)."""
    def hook(event: str, args: tuple, _watched: frozenset[int] = frozenset(),
             _id=id, _write=os.write, _exit=os._exit, _code: int = protocol.TAMPERED_EXIT,
             _line: bytes = b"", _keep: tuple[FunctionType, ...] = ()) -> None:
        if event == "object.__setattr__" and _id(args[0]) in _watched:
            _write(2, _line)
            _exit(_code)

    also = tuple(also)
    watched = frozenset({id(f) for f in (*snapshot.state[1][0][0], *also)} | {id(hook)})
    line = (f"{protocol.TAMPERED_MARK} a watched function's code or defaults were "
            f"replaced\n").encode()
    hook.__defaults__ = (watched, id, os.write, os._exit, protocol.TAMPERED_EXIT, line, also)
    sys.addaudithook(hook)
