"""Checks that run inside the candidate's process, after its import and after every call.

The worker belongs to the candidate from its first import, so nothing here decides a verdict
alone: inputs come from the driver, outputs go to the driver the moment a call returns, and the
driver recomputes every statistic. These checks catch what a candidate does to the process it
shares with the harness, so that it cannot see or change the harness's work between calls:
- monkey-patching (identities.py): every callable of the watched modules and classes, every
  name of solforge's modules, every watched function's code, defaults and closure, the
  `sys.modules` entries, the type of each watched module and harness object, the trace,
  profile and frame-evaluation hooks, and the instance state of the harness's own objects
  (pins: a guard hook set to None, a wrapped `send`, a swapped record), snapshotted before the
  candidate is imported; the worker compares them in the frame that called the candidate, the
  moment each call returns (return_check.py);
- hooks that see the harness's tensors: PyTorch dispatcher entries of the ops the harness runs
  (a `torch.library` kernel that replaces `copy_` or the random-number kernels, bit for bit the
  same numbers), Python kernels on those ops, the TorchFunctionMode and TorchDispatchMode stacks,
  `sys.monitoring` tools, and audit hooks (a hook of the harness, added first, sees every later
  `sys.addaudithook`);
- work after the call returned: the CPU time of every Python thread (the candidate's, the
  libraries') between a call's return and the next check, through each thread's own CPU clock.
  A thread is a cheat only when it works after the call returned, not because it exists: an
  idle pool, a thread blocked in `queue.get`, tqdm's monitor or an OpenMP team pass. Native
  threads (OpenMP teams spin for a while after a parallel region) are judged by their effect:
  the driver holds the outputs from the moment the call returned;
- forked processes: an `os.fork` is flagged through `os.register_at_fork`; any child process
  still alive after a call is flagged too. The worker is made a child subreaper, so a
  double-forked daemon re-parents to it and stays visible;
- the current CUDA stream left switched to a side stream.
Each finding is a `Violation`, reported as REWARD_HACK with the evidence (the worker's own
check at a return ends the process instead: return_check.py). What a call can leave for the
harness's work after it (hooks, callbacks, forks, the stream) is checked right after that,
before the harness copies its outputs (`check_returned`): a hook that runs in that copy and
then removes itself is gone by the next call. What other threads did is checked before the
next call (`check_threads`), which closes the window between the two.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from types import CodeType
from typing import Any

import torch

from solforge.harness import signals, tracer_hook
from solforge.harness.identities import (
    WATCHED_MODULES,
    IdentitySnapshot,
    function_changes,
    harness_modules,
    identity_changes,
    install_tamper_hook,
)

# The aten ops the worker runs on inputs and outputs (receive, copy to the device, poison,
# compare, hand over) and the random-number kernels: a kernel registered over one of them sees
# every tensor the harness moves through it.
WATCHED_OPS = (
    "aten::copy_", "aten::_to_copy", "aten::to.dtype_layout", "aten::clone",
    "aten::contiguous", "aten::empty.memory_format", "aten::empty_strided", "aten::fill_.Scalar",
    "aten::view", "aten::view.dtype", "aten::reshape", "aten::detach", "aten::alias",
    "aten::as_strided", "aten::set_.source_Storage_storage_offset", "aten::equal",
    "aten::_local_scalar_dense", "aten::normal_", "aten::uniform_", "aten::random_",
    "aten::randn", "aten::rand", "aten::randint", "aten::randperm", "aten::bernoulli_",
    "aten::exponential_", "aten::sum", "aten::amax",
    # the timer's ranges: the device work launched inside the harness's own ranges is not
    # the candidate's time, so a kernel over these could hide work there
    "profiler::_record_function_enter_new", "profiler::_record_function_exit._RecordFunction",
    "profiler::_record_function_exit",
)
_PR_SET_CHILD_SUBREAPER = 36
# Threads started from these packages belong to the libraries, not to the candidate.
LIBRARY_PACKAGES = ("torch", "triton")
_STDLIB = sysconfig.get_paths()["stdlib"]
# CPU time a thread may spend between a call's return and the next check: waking up to find
# an empty queue costs microseconds; doing a kernel's work costs far more.
IDLE_CPU_S = 0.002
# Less CPU than that can still be a late writer when it comes after every call (a small output
# filled from a pool thread costs a tenth of a millisecond): a thread that used more than a
# wake-up's worth after REPEATED_RETURNS of the calls is caught however little each time was. A
# blocked pool thread that finished its job within the call spends under 20 us on the way back
# to its queue.
WAKE_CPU_S = 0.00005
REPEATED_RETURNS = 3
_AUDITED = ("sys.addaudithook", "sys.monitoring.register_callback")


@dataclass(frozen=True)
class Violation:
    message: str


class HookSnapshot:
    """What can see the harness's tensors without replacing a Python name: dispatcher kernels,
    Python kernels and mode stacks of PyTorch, `sys.monitoring` tools."""

    def __init__(self, ops: Iterable[str] = WATCHED_OPS) -> None:
        self.ops = tuple(op for op in ops if _dispatch_dump(op) is not None)
        self.state = self.take()

    def take(self) -> dict[str, Any]:
        state: dict[str, Any] = {op: _dispatch_dump(op) for op in self.ops}
        state |= {f"python kernels of {op}": _python_kernels(op) for op in self.ops}
        state["TorchFunctionMode stack"] = _function_modes()
        state["TorchDispatchMode stack"] = _dispatch_stack_length()
        state["sys.monitoring tools"] = _monitoring_tools()
        return state

    def changed(self) -> list[str]:
        now = self.take()
        return [name for name, value in now.items() if not _same(value, self.state.get(name))]


def _same(now: Any, then: Any) -> bool:
    """Equal state; kernels (dicts) by the identity of each function, never by an `==` that a
    registered object could answer itself."""
    if isinstance(now, dict) and isinstance(then, dict):
        return now.keys() == then.keys() and all(now[key] is then[key] for key in then)
    return now == then


def _dispatch_dump(op: str) -> str | None:
    try:
        return torch._C._dispatch_dump(op)
    except RuntimeError:
        return None  # no such overload in this PyTorch


def _python_kernels(op: str) -> dict[Any, Any]:
    """Python kernels registered on the op's overload (`py_impl`), by dispatch key (a copy:
    the functions themselves, compared by identity)."""
    name, _, overload = op.removeprefix("aten::").partition(".")
    try:
        packet = getattr(torch.ops.aten, name)
        handle = getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return {}
    return dict(getattr(handle, "py_kernels", {}))


def _function_modes() -> tuple[str, ...]:
    """The active TorchFunctionModes but `torch.set_default_device`'s own (exactly its class,
    whose methods are watched like the harness's): that one only fills in a device."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    return tuple(type(mode).__qualname__ for mode in _get_current_function_mode_stack()
                 if type(mode) is not DeviceContext)


def _dispatch_stack_length() -> int:
    length = getattr(torch._C, "_len_torch_dispatch_stack", None)
    return length() if length is not None else 0


def _monitoring_tools() -> tuple[Any, ...]:
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12 and later
    if monitoring is None:
        return ()
    return tuple((monitoring.get_tool(i), monitoring.get_events(i)) for i in range(6))


class AuditWatch:
    """An audit hook of the harness, added before the candidate exists (hooks cannot be
    removed, and each later `sys.addaudithook` is announced to the earlier ones): counts the
    events by which code installs a hook that can watch the harness."""

    def __init__(self) -> None:
        counts = {event: 0 for event in _AUDITED}

        def hook(event: str, args: tuple) -> None:
            if event in counts:
                counts[event] += 1

        sys.addaudithook(hook)
        self._counts = counts
        self.seen = dict(counts)

    def settle(self) -> None:
        """What was counted so far is the harness's own (its tamper hook, identities.py)."""
        self.seen = dict(self._counts)

    def changed(self) -> list[str]:
        return [f"{event} ({self._counts[event] - self.seen[event]} time(s))"
                for event in _AUDITED if self._counts[event] != self.seen[event]]


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
    """Processes whose parent is `pid` (default: this one) that have not exited. From each
    thread's `children` list in /proc where the kernel keeps one (a few small files), else
    from every process's stat (about 20 us a process: milliseconds on a busy machine, and the
    GPU worker, without a PID namespace, sees the whole machine's processes)."""
    pid = os.getpid() if pid is None else pid
    listed = _listed_children(pid)
    if listed is None:
        listed = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    return [child for child in listed if _live_parent(child) == pid]


def _listed_children(pid: int) -> list[int] | None:
    """The children the kernel lists for each thread of `pid` (a re-parented orphan is on
    its new parent's list); None where the kernel keeps no such list."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as file:
                found.extend(int(child) for child in file.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended since the listing
            return None  # no children lists in this kernel (CONFIG_PROC_CHILDREN)
        except OSError:
            continue
    return found


def _live_parent(pid: int) -> int | None:
    """The parent of a process that has not exited (None for a zombie or a gone process)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name may hold spaces and parentheses
    return int(fields[1]) if len(fields) > 1 and fields[0] != "Z" else None


class ThreadOrigins:
    """Remembers who started each Python thread, by wrapping `threading.Thread.start`, and the
    CPU time each thread had used when it ended (a thread that works after a call returned and
    exits before the next check is still seen)."""

    def __init__(self) -> None:
        self.library: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self.starter: weakref.WeakKeyDictionary[threading.Thread, str] = (
            weakref.WeakKeyDictionary())
        self.ended: dict[int, tuple[str, float]] = {}  # native id -> (name, CPU seconds)
        original = threading.Thread.start
        origins = self

        def start(thread: threading.Thread) -> None:
            module = _starting_module(sys._getframe(1))
            origins.starter[thread] = module
            if module.split(".", 1)[0] in LIBRARY_PACKAGES:
                origins.library.add(thread)
            run = thread.run

            def counted_run() -> None:
                try:
                    run()
                finally:
                    origins.ended[threading.get_native_id()] = (thread.name, time.thread_time())

            thread.run = counted_run
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


def thread_cpu_seconds(thread: threading.Thread) -> float | None:
    """The CPU time `thread` has used (its own clock; None when it has ended)."""
    if thread.ident is None or not thread.is_alive():
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, ValueError):
        return None


class WorkAfterReturn:
    """The CPU time of every other Python thread when a call returned, to find threads that
    worked after it: a late write, or work moved out of the timed call. Each return opens a
    window that the next call closes; a thread is caught for much work in one window, or for
    some work in REPEATED_RETURNS of them."""

    def __init__(self, origins: ThreadOrigins) -> None:
        self.origins = origins
        self.at_return: dict[threading.Thread, float] = {}
        self.returned: float | None = None
        # native id -> (name, CPU seconds) in the open window, as the latest check saw it
        self.window: dict[int, tuple[str, float]] = {}
        # native id -> (name, closed windows it used more than WAKE_CPU_S in, CPU seconds)
        self.worked_after: dict[int, tuple[str, int, float]] = {}

    def mark(self) -> None:
        """Right after a call returned (and its device work was waited for)."""
        self._close_window()
        me = threading.current_thread()
        self.origins.ended.clear()
        self.at_return = {t: cpu for t in threading.enumerate()
                          if t is not me and (cpu := thread_cpu_seconds(t)) is not None}
        self.returned = time.monotonic()

    def busy(self, allowance_s: float = IDLE_CPU_S) -> list[str]:
        """Threads that used more than `allowance_s` of CPU since the last `mark`, or worked
        after REPEATED_RETURNS returns; keeps what it saw of this window for the next `mark`."""
        if self.returned is None:
            return []
        me = threading.current_thread()
        found, window = [], {}
        for thread in threading.enumerate():
            if thread is me:
                continue
            now = thread_cpu_seconds(thread)
            used = (now or 0.0) - self.at_return.get(thread, 0.0)
            if now is not None:
                window[thread.native_id] = (thread.name, used)
            if now is not None and used > allowance_s:
                found.append(self._describe(thread.name, thread, used))
        at_return_by_id = {t.native_id: cpu for t, cpu in self.at_return.items()}
        for native_id, (name, cpu) in self.origins.ended.items():
            used = cpu - at_return_by_id.get(native_id, 0.0)
            window[native_id] = (name, used)
            if used > allowance_s:
                found.append(self._describe(name, None, used) + " and ended")
        self.window = window
        return found + self._repeated()

    def _close_window(self) -> None:
        """Count the threads that worked in the window the last checks saw."""
        worked = dict(self.worked_after)
        for native_id, (name, used) in self.window.items():
            if used > WAKE_CPU_S:
                _, count, total = worked.get(native_id, (name, 0, 0.0))
                worked[native_id] = (name, count + 1, total + used)
        self.worked_after, self.window = worked, {}

    def _repeated(self) -> list[str]:
        """Threads that worked after REPEATED_RETURNS returns, this window included."""
        found = []
        for native_id in self.worked_after.keys() | self.window.keys():
            name, count, total = self.worked_after.get(native_id, ("?", 0, 0.0))
            name, used = self.window.get(native_id, (name, 0.0))
            if used > WAKE_CPU_S:
                count, total = count + 1, total + used
            if count >= REPEATED_RETURNS:
                found.append(f"{name} worked after {count} returns ({total * 1e3:.2f} ms of CPU "
                             f"in all)")
        return sorted(found)

    def _describe(self, name: str, thread: threading.Thread | None, used: float) -> str:
        starter = self.origins.starter.get(thread, "?") if thread is not None else "?"
        return f"{name} (started from {starter}) used {used * 1e3:.1f} ms of CPU"


class Guards:
    """Everything a call must leave as it found it. Built before the candidate is imported."""

    def __init__(self, device: torch.device) -> None:
        become_subreaper()
        self.device = device
        self.audit = AuditWatch()  # first: it sees every hook added after it
        self.thread_origins = ThreadOrigins()  # before the snapshot: its wrapper is watched too
        self.identities = IdentitySnapshot((*WATCHED_MODULES, *harness_modules()))
        self.hooks = HookSnapshot()
        self._changed = self.identities.changed  # bound now: patching the class later is seen
        self._hooks_changed = self.hooks.changed
        self.collector_list = gc.callbacks  # the interpreter's own list: rebinding the name
        self.collector_callbacks = tuple(gc.callbacks)  # hides nothing from this check
        self.forks = ForkCounter()
        self.after_return = WorkAfterReturn(self.thread_origins)
        self.unblocked_at_start = signals.unblocked_threads()
        self.dispositions = signals.Dispositions.now()
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None

    def pin(self, label: str, instance: object, mutable: Iterable[str] = ()) -> None:
        self.identities.pin(label, instance, mutable)

    def unpin(self, label: str) -> None:
        self.identities.unpin(label)

    def end_on_tampering(self, setters: Iterable[CodeType] = ()) -> None:
        """From now on, a watched function given new code or defaults ends this process
        (identities.install_tamper_hook), and so does a trace or profile function set by
        anything but the frames that run `setters` over the harness's own frames
        (tracer_hook.py). The worker's, never a process that merely checks."""
        tracers = tracer_hook.install(setters, tracer_hook.harness_codes(harness_modules()))
        gate = self.identities.gate()  # its counting callback (dict_watch.py), if any
        install_tamper_hook(self.identities, also=(tracers, *(gate[3][1:2] if gate else ())))
        self.audit.settle()  # those hooks are the harness's own

    def root(self) -> tuple[Any, ...]:
        """What the worker binds before each call to run the identity check the moment it
        returns (worker.py): the check, its code and defaults as they are now, before the
        candidate exists, and the snapshot's state."""
        return (identity_changes, identity_changes.__code__, identity_changes.__defaults__,
                self.identities.state)

    def returned(self) -> None:
        """A call has just returned: from now on, other threads should be idle."""
        self.after_return.mark()

    def check(self, children: bool = True, functions: bool = False) -> list[Violation]:
        """Every violation since the snapshot; `children` also scans /proc for child
        processes (tens of milliseconds on a busy machine: not between timed calls);
        `functions` also compares each watched function's code and defaults (what the tamper
        hook stops as it happens: a millisecond, once per workload)."""
        return (self.check_identities(functions) + self.check_returned()
                + self.check_threads(children))

    def check_identities(self, functions: bool = False) -> list[Violation]:
        """Replaced names and functions (identities.py). After each call the worker runs this
        check itself, from the frame that called the candidate (worker.py)."""
        # object's own lookup, not the class's: a `__getattribute__` given to this class later
        # does not answer for the identity check, which is what reports it
        changed = object.__getattribute__(self, "_changed")()
        if functions:
            changed += function_changes(self.identities.state)
        if not changed:
            return []
        return [Violation(f"replaced harness or timing functions: {', '.join(changed[:8])}")]

    def check_returned(self) -> list[Violation]:
        """What a call can leave for the harness's own work after it, checked the moment it
        returns, before the harness touches its outputs: hooks that see the harness's tensors,
        collector callbacks, forks, the current stream (the names and functions were checked
        before this, at the return itself). Checked only before the next call, a kernel
        registered over the copy that hands the outputs over could compute them there, after
        the timed call, and unregister itself before anyone looked
        (tests/exploits/hand_over_hook)."""
        found = []
        hooks = self._hooks_changed() + self.audit.changed()
        if hooks:
            found.append(Violation(f"installed hooks that see the harness's tensors: "
                                   f"{', '.join(hooks[:8])}"))
        callbacks = self.collector_list
        if gc.callbacks is not callbacks or len(callbacks) != len(self.collector_callbacks) or any(
                now is not then for now, then in zip(callbacks, self.collector_callbacks)):
            found.append(Violation("added a garbage-collector callback (gc.callbacks): it runs "
                                   "whenever a collection does, after a call returned too"))
        if self.forks.count:
            found.append(Violation(f"called os.fork {self.forks.count} time(s): a forked copy "
                                   "can compute outside the timed window"))
        if self.stream is not None and torch.cuda.current_stream(self.device) != self.stream:
            found.append(Violation("left a side stream as the current CUDA stream"))
        return found

    def check_threads(self, children: bool = True) -> list[Violation]:
        """What ran beside the harness since the last return: threads that unblocked signals
        or worked after it, and (with `children`) child processes left running. Checked before
        each call: the window it closes is the whole time between two calls."""
        found = []
        unblocked = self._unblocked_threads()
        if unblocked:
            found.append(Violation(f"a thread unblocked signals ({unblocked}), blocked in the "
                                   "worker so that no signal handler runs after a call "
                                   "returned"))
        busy = self.after_return.busy()
        if busy:
            found.append(Violation(f"background thread(s) did work after the call returned: "
                                   f"{'; '.join(busy[:5])}"))
        if children:
            pids = _wait_for_exit(live_children(), seconds=0.5)
            if pids:
                found.append(Violation(f"left child processes running (pids {pids[:5]})"))
        return found

    def _unblocked_threads(self) -> str:
        """Threads that unblocked a signal with a handler of the candidate since the snapshot
        (a worker starts with every signal blocked in every thread; elsewhere, what was
        unblocked then is left alone)."""
        then = self.unblocked_at_start
        now = [(tid, bits & ~then.get(tid, 0))
               for tid, bits in signals.unblocked_threads().items() if bits & ~then.get(tid, 0)]
        now = [(tid, self.dispositions.reachable(bits)) for tid, bits in now]
        return "; ".join(f"thread {tid}: {signals.names(bits)}" for tid, bits in now[:3] if bits)


def _wait_for_exit(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after a short grace period (a compiler subprocess being reaped)."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [p for p in pids if p in live_children()]
    return pids
