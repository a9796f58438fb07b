"""The runner interface: units of evaluation work go in, results come out as they complete.

A unit (`EvalTask`) is one solution, or the reference as one baseline kind, on the workloads
of one problem, evaluated by the harness exactly as `solforge eval` does. It is a plain,
picklable description (problem address, solution JSON or baseline kind, EvalConfig), so it can
cross to a fresh process (`local.py`) or to another machine (`ray.py`).

The process that carries a unit can die: a kill -9, the out-of-memory killer, a lost node, or a
candidate that kills its own driver. Every runner then starts the unit again, up to `retries`
more times; a unit lost on every attempt comes back as failure traces (RUNTIME_ERROR, with the
reason), so the caller records it and never waits for it again. Results of the other units are
unaffected: each comes back on its own, the moment it is done.

A runner given a deadline (`stop_starting_at`) starts no unit that could not end before it, by
the longest of the last RECENT_UNITS units: a suite's units come in problem order and neighbours
are alike, while the longest unit so far would hold back every later call's tail (H200,
2026-12-03: after one 140 s torch.compile baseline early in a call, among units of 4-27 s, the
call ended 173 s before its 575, about 110 s more than its margins). The units still waiting
then are withdrawn, never started, and left for a later run. A unit that runs past the
deadline anyway can be stopped (`abandon`): it is withdrawn too, its partial work lost, so the
caller ends on time with everything else kept.

    with open_runner("local", "cpu", workers=2) as runner:
        for task in tasks:
            runner.submit(task)
        for result in runner.results():
            store(result.traces)
"""

from __future__ import annotations

import contextlib
import datetime
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.data.trace import Environment, Evaluation, Status, Trace
from solforge.defaults import resolve_device, resolve_profile
from solforge.errors import SolforgeError
from solforge.hardware.profile import HardwareProfile
from solforge.harness.baseline import KINDS, reference_solution_name
from solforge.harness.evaluate import EvalConfig, select_workloads
from solforge.measure.environment import environment, run_environment
from solforge.problem.suite import open_problem

DEFAULT_RETRIES = 1  # a unit whose process dies is started once more, then recorded as failed
RECENT_UNITS = 8  # the units whose longest predicts the next one's length


@dataclass(frozen=True)
class EvalTask:
    """One unit of evaluation work: a solution, or the reference timed as a baseline kind.

    `problem` is a bundled `tier/name` address (found on every machine with solforge
    installed) or a problem folder (which must exist where the unit runs). `config.device` is
    the device type, "cuda" or "cpu": the runner gives each unit its own GPU."""

    problem: str
    config: EvalConfig
    solution: dict[str, Any] | None = None  # the solution JSON (FlashInfer-Bench format)
    baseline: str | None = None  # "eager" or "compile" when there is no solution
    key: str = ""  # the caller's name for the unit, handed back with its result

    def __post_init__(self) -> None:
        if (self.solution is None) == (self.baseline is None):
            raise SolforgeError("a unit of work is either a solution or a baseline kind")
        if self.baseline is not None and self.baseline not in KINDS["best"]:
            raise SolforgeError(f"unknown baseline kind {self.baseline!r} (eager or compile)")

    @property
    def label(self) -> str:
        """The solution's name, or `reference:<kind>`: the name its traces carry."""
        if self.solution is None:
            return reference_solution_name(self.baseline)
        return str(self.solution.get("name", "?"))


@dataclass(frozen=True)
class Outcome:
    """What the process that ran a unit sent back: its traces, or why it could not run."""

    traces: tuple[Trace, ...] = ()
    error: str | None = None  # a SolforgeError: bad problem, solution or configuration
    where: str = ""  # the slot it ran in, when only that process knows (a Ray node and GPU)
    seconds: float = 0.0  # wall time of the evaluation inside that process
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # harness/phases.py


@dataclass(frozen=True)
class Ended:
    """How one attempt ended: an outcome, or `outcome` None and the reason the process died."""

    outcome: Outcome | None
    reason: str = ""
    slot: str = ""
    seconds: float = 0.0  # how long the attempt held its slot
    build_seconds: float | None = None  # the separate compile step, where there was one


@dataclass(frozen=True)
class TaskResult:
    task: EvalTask
    traces: tuple[Trace, ...]  # measured, or the failure records of a unit lost every time
    attempts: int
    slot: str  # where the last attempt ran: "cpu:0", "cuda:1", "ray:<node>:gpu0"
    seconds: float  # time the last attempt held its slot (GPU-seconds for a GPU slot)
    error: str | None = None  # the unit could not run at all; no traces
    lost: str | None = None  # why the process died on the last attempt; traces are failures
    build_seconds: float | None = None  # the compile step, when it ran as its own task
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # where `seconds` went


@dataclass(frozen=True)
class Machine:
    """What a runner's slots evaluate on, as read on one of them."""

    device_type: str  # "cuda" or "cpu"
    environment: Environment  # the hardware name and library versions traces carry
    run_environment: dict[str, Any]  # what the store keeps about a run's machine
    profile: HardwareProfile  # T_SOL's profile for this device when none is named
    cuda_arch: str | None = None  # "9.0": what a C++ build compiles for (TORCH_CUDA_ARCH_LIST)

    @property
    def hardware(self) -> str:
        return self.environment.hardware


def describe_machine(device_type: str) -> Machine:
    """The machine of the current process's (first visible) device."""
    device = resolve_device(device_type)
    arch = None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        arch = f"{major}.{minor}"
    return Machine(device.type, environment(device), run_environment(device),
                   resolve_profile(None, device), arch)


def failure_traces(task: EvalTask, machine: Machine, status: Status,
                   message: str) -> tuple[Trace, ...]:
    """One trace per workload the unit would have evaluated, each carrying `status` and why:
    what a unit that never produced traces of its own is recorded as."""
    problem = open_problem(task.problem)
    workloads = select_workloads(problem, task.config, torch.device(machine.device_type))
    timestamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    evaluation = Evaluation(status=status, environment=machine.environment,
                            timestamp=timestamp, log=message)
    return tuple(Trace(problem.name, task.label, workload.to_dict(), evaluation)
                 for workload in workloads)


@dataclass
class Attempt:
    task: EvalTask
    number: int = 1  # 1 for the first try
    reasons: list[str] = field(default_factory=list)  # why each earlier attempt was lost


class TaskRunner(ABC):
    """Runs units in parallel slots, retries the lost ones, hands back results as they end.

    Subclasses start an attempt (`_start`) and wait for any one to end (`_wait_any`); the
    queueing, the retries and the failure records are here, the same for every runner."""

    def __init__(self, machine: Machine, slots: int, retries: int = DEFAULT_RETRIES,
                 in_flight: int | None = None) -> None:
        self.machine = machine
        self.slots = slots  # evaluations that run at once: keep this many submitted
        self.retries = retries
        self._in_flight_limit = in_flight  # None: hand everything to the backend at once
        self._waiting: deque[Attempt] = deque()
        self._running: list[Attempt] = []  # in the order they started
        self.deadline: float | None = None  # time.monotonic(): start no unit that ends later
        self.withdrawn: list[EvalTask] = []  # units the deadline kept from starting, or stopped
        self._recent_s: deque[float] = deque(maxlen=RECENT_UNITS)  # the last units' seconds

    @property
    def pending(self) -> int:
        """Units submitted whose result has not been handed back yet."""
        return len(self._waiting) + len(self._running)

    def submit(self, task: EvalTask, first: bool = False) -> None:
        """Queue a unit: behind those waiting, or ahead of them (`first`)."""
        self._queue(Attempt(task), first)
        self._fill()

    def _queue(self, attempt: Attempt, first: bool) -> None:
        if first:
            self._waiting.appendleft(attempt)
        else:
            self._waiting.append(attempt)

    def results(self) -> Iterator[TaskResult]:
        """Every pending result, in the order the units end; units submitted while iterating
        are waited for too."""
        while self.pending:
            result = self.next_result()
            if result is not None:
                yield result

    def next_result(self, timeout: float | None = None) -> TaskResult | None:
        """The next unit to end, or None when none ended within `timeout` seconds (None: wait
        as long as it takes) or nothing is pending."""
        while self.pending:
            ended = self._wait_any(timeout)
            if ended is None:
                return None
            attempt, end = ended
            self._running = [a for a in self._running if a is not attempt]
            self._recent_s.append(end.seconds)
            if end.outcome is None and attempt.number <= self.retries:
                attempt.reasons.append(end.reason)
                attempt.number += 1
                self._waiting.appendleft(attempt)
                self._fill()
                continue
            self._fill()
            return self._result(attempt, end)
        return None

    def stop_starting_at(self, deadline: float | None) -> None:
        """Start no unit after `deadline` (a time.monotonic()) less the longest of the recent
        units; units waiting then are withdrawn (`withdrawn`). Units a backend already holds (a
        Ray runner without a cap on units in flight) are not withdrawn."""
        self.deadline = deadline
        self._fill()

    @contextlib.contextmanager
    def exclusive_device(self) -> Iterator[None]:
        """The runner's GPUs to the caller alone while the block runs (a profiler's replays
        would slow a unit timed meanwhile). Nothing to wait for where no units share a GPU."""
        yield

    def abandon(self) -> None:
        """Stop every unit now, recording none: those running are killed and those waiting
        never start; all are withdrawn, for a later run to do."""
        self.withdrawn += [attempt.task for attempt in self._running]
        self.withdrawn += [attempt.task for attempt in self._waiting]
        self.close()

    def close(self) -> None:
        """Stop every unit still running; their results are not wanted any more."""
        self._waiting.clear()
        self._running.clear()
        self._stop_all()

    def __enter__(self) -> TaskRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _fill(self) -> None:
        """Start waiting attempts, in order, skipping those not ready (`_ready`); withdraw
        them all once a unit started now could not end before the deadline."""
        expected_s = max(self._recent_s, default=0.0)
        if self.deadline is not None and time.monotonic() + expected_s > self.deadline:
            self.withdrawn += [attempt.task for attempt in self._waiting]
            self._waiting.clear()
            return
        limit = self._in_flight_limit
        while self._waiting and (limit is None or len(self._running) < limit):
            attempt = next((a for a in self._waiting if self._ready(a)), None)
            if attempt is None:
                return
            self._waiting.remove(attempt)
            self._running.append(attempt)
            self._start(attempt)

    def _ready(self, attempt: Attempt) -> bool:
        """Whether an attempt can take a slot now (a runner compiling ahead says no until its
        build is done)."""
        return True

    def _result(self, attempt: Attempt, end: Ended) -> TaskResult:
        task = attempt.task
        if end.outcome is not None:
            outcome = end.outcome
            return TaskResult(task, outcome.traces, attempt.number, end.slot, end.seconds,
                              outcome.error, None, end.build_seconds, outcome.phases)
        reasons = "; ".join(f"attempt {number}: {reason}" for number, reason
                            in enumerate([*attempt.reasons, end.reason], start=1))
        message = f"the process evaluating this unit died on every attempt ({reasons})"
        traces = failure_traces(task, self.machine, Status.RUNTIME_ERROR, message)
        return TaskResult(task, traces, attempt.number, end.slot, end.seconds, None, end.reason,
                          end.build_seconds)

    @abstractmethod
    def _start(self, attempt: Attempt) -> None:
        """Start one attempt; it must end in `_wait_any`, whatever happens to its process."""

    @abstractmethod
    def _wait_any(self, timeout: float | None) -> tuple[Attempt, Ended] | None:
        """Block until one started attempt ends (None: `timeout` passed first)."""

    @abstractmethod
    def _stop_all(self) -> None:
        """Stop every started attempt and release what the runner holds."""
