"""Checks that run inside the candidate's process, after its import and after every call.

They catch what a candidate does to the process it shares with the harness:
- monkey-patching: every callable of the timing, channel, guards and worker modules (and of the
  classes they define), of `time`, `builtins`, `torch`, `torch.cuda`, the profiler modules, and
  of the classes the measurement relies on (`torch.Tensor`, `torch.cuda.Event`,
  `torch.cuda.CUDAGraph`, the profiler's classes) is snapshotted before the candidate is imported
  and compared by identity (`is`, so a freed and reused id cannot fool it); so are `sys.modules`
  entries and the trace/profile hooks;
- background threads: a Python thread the candidate started that is still alive (compared by
  identity, not by count), and native threads beyond those alive after the first call (JIT
  compilers and OpenMP pools start theirs then). Threads that library code starts (torch.compile's
  compile pool, Triton's compiler) are told apart by who called `Thread.start`: the harness wraps
  it before the candidate is imported, and the wrapper is among the watched identities;
- forked processes: an `os.fork` (a copy of the candidate computing outside the timed window) is
  flagged through `os.register_at_fork`; any child process still alive after a call is flagged
  too. Short-lived subprocesses that have exited (a compiler Triton runs) are fine. The worker is
  made a child subreaper, so a double-forked daemon re-parents to it and stays visible;
- the current CUDA stream left switched to a side stream.
Each finding is a `Violation`, reported as REWARD_HACK with the evidence.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

WATCHED_MODULES = (
    "time", "builtins", "torch", "torch.cuda", "torch.profiler", "torch.autograd.profiler",
    "solforge.measure.timing", "solforge.measure.clocks", "solforge.harness.channel",
    "solforge.harness.guards", "solforge.harness.worker", "solforge.problem.inputs",
    "solforge.problem.outputs",
)
_PR_SET_CHILD_SUBREAPER = 36
# Threads started from these packages belong to the libraries, not to the candidate.
LIBRARY_PACKAGES = ("torch", "triton")
_STDLIB = sysconfig.get_paths()["stdlib"]


@dataclass(frozen=True)
class Violation:
    message: str


def _watched_classes() -> dict[str, type]:
    from torch.autograd.profiler import record_function
    from torch.profiler import profile

    return {"torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
            "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Stream": torch.cuda.Stream, "torch.cuda.CUDAGraph": torch.cuda.CUDAGraph,
            "torch.profiler.profile": profile, "record_function": record_function,
            "threading.Thread": threading.Thread}


class IdentitySnapshot:
    """The objects bound to every watched name, to be compared by identity later."""

    def __init__(self, module_names: Iterable[str] = WATCHED_MODULES) -> None:
        self.modules = {name: importlib.import_module(name) for name in module_names}
        self.bindings: dict[str, tuple[Any, str, Any]] = {}
        for name, module in self.modules.items():
            self._take(name, module)
        for name, cls in _watched_classes().items():
            self._take(name, cls)
        self.trace_hooks = _trace_hooks()

    def _take(self, label: str, owner: ModuleType | type) -> None:
        for attribute, value in list(vars(owner).items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                self.bindings[f"{label}.{attribute}"] = (owner, attribute, value)
            if isinstance(owner, ModuleType) and _defined_by_harness(value, owner):
                self._take(f"{label}.{attribute}", value)  # the harness's own classes' methods

    def changed(self) -> list[str]:
        """Names now bound to another object (or gone), modules swapped, trace hooks set."""
        found = [label for label, (owner, attribute, value) in self.bindings.items()
                 if vars(owner).get(attribute, _MISSING) is not value]
        found += [f"sys.modules[{name!r}]" for name, module in self.modules.items()
                  if sys.modules.get(name) is not module]
        if _trace_hooks() != self.trace_hooks:
            found.append("sys.settrace/sys.setprofile/threading hooks")
        return found


_MISSING = object()


def _defined_by_harness(value: Any, module: ModuleType) -> bool:
    return (isinstance(value, type) and value.__module__ == module.__name__
            and module.__name__.startswith("solforge."))


def _trace_hooks() -> tuple[Any, ...]:
    return (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())


class ForkCounter:
    """Counts `os.fork` calls made by this process (Python-level forks; exec'd subprocesses
    started through `subprocess` do not run these hooks)."""

    def __init__(self) -> None:
        self.count = 0
        self.pid = os.getpid()
        os.register_at_fork(before=self._before_fork)

    def _before_fork(self) -> None:
        if os.getpid() == self.pid:
            self.count += 1


def become_subreaper() -> None:
    """Orphaned descendants re-parent to this process instead of init (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def live_children(pid: int | None = None) -> list[int]:
    """Processes whose parent is `pid` (default: this one), read from /proc."""
    pid = os.getpid() if pid is None else pid
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # the name may hold spaces and parentheses
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(entry.name))
    return children


def native_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class ThreadOrigins:
    """Remembers which threads library code started, by wrapping `threading.Thread.start`."""

    def __init__(self) -> None:
        self.library: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self.starter: weakref.WeakKeyDictionary[threading.Thread, str] = (
            weakref.WeakKeyDictionary())
        original = threading.Thread.start
        origins = self

        def start(thread: threading.Thread) -> None:
            module = _starting_module(sys._getframe(1))
            origins.starter[thread] = module
            if module.split(".", 1)[0] in LIBRARY_PACKAGES:
                origins.library.add(thread)
            original(thread)

        threading.Thread.start = start


def _starting_module(frame) -> str:
    """The first caller outside the standard library (threading, concurrent.futures, subprocess
    and multiprocessing are the machinery between whoever wanted a thread and `Thread.start`)."""
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_STDLIB):
            return frame.f_globals.get("__name__", "?")
        frame = frame.f_back
    return "?"


class Guards:
    """Everything a call must leave as it found it. Built before the candidate is imported."""

    def __init__(self, device: torch.device) -> None:
        become_subreaper()
        self.device = device
        self.thread_origins = ThreadOrigins()  # before the snapshot: its wrapper is watched too
        self.identities = IdentitySnapshot()
        self._changed = self.identities.changed  # bound now: patching the class later is seen
        self.forks = ForkCounter()
        self.python_threads = set(threading.enumerate())
        self.native_threads: int | None = None
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None

    def settle_native_threads(self) -> None:
        """Take the native thread count as the baseline (after the first call's JIT)."""
        self.native_threads = native_thread_count()

    def check(self) -> list[Violation]:
        found = []
        changed = self._changed()
        if changed:
            found.append(Violation(f"replaced harness or timing functions: "
                                   f"{', '.join(changed[:8])}"))
        if self.forks.count:
            found.append(Violation(f"called os.fork {self.forks.count} time(s): a forked copy "
                                   "can compute outside the timed window"))
        found += self._thread_violations()
        children = _wait_for_exit(live_children(), seconds=0.5)
        if children:
            found.append(Violation(f"left child processes running (pids {children[:5]})"))
        if self.stream is not None and torch.cuda.current_stream(self.device) != self.stream:
            found.append(Violation("left a side stream as the current CUDA stream"))
        return found

    def _thread_violations(self) -> list[Violation]:
        found = []
        extra = [t for t in threading.enumerate() if t not in self.python_threads
                 and t not in self.thread_origins.library and t.is_alive()]
        if extra:
            starters = self.thread_origins.starter
            names = ", ".join(f"{t.name} from {starters.get(t, '?')}" for t in extra[:5])
            found.append(Violation(f"left {len(extra)} background Python thread(s) running "
                                   f"({names})"))
        native = native_thread_count()
        if self.native_threads is not None and native > self.native_threads:
            found.append(Violation(f"started native threads: {native} now, "
                                   f"{self.native_threads} after the first call"))
        return found


def _wait_for_exit(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after a short grace period (a compiler subprocess being reaped)."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [p for p in pids if p in live_children()]
    return pids

