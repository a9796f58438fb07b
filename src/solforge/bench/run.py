"""The bench loop: per problem its analysis, its baselines and its solutions, every trace
committed to the store the moment it comes back.

The work is cut into units: the reference timed under eager PyTorch and under torch.compile,
then each solution. A unit runs in one worker process over the problem's workloads (a worker
costs seconds to start, so never one per workload) and covers only the workloads that have no
trace yet for its (solution, device, hardware) in the store: a rerun does what is left, and
`fresh` re-measures everything. Units go through a runner (solforge.runners: local processes,
one per GPU or core, or a Ray cluster), several at once; a problem's solutions start once its
baselines are measured, so their T_b comes from the baseline cache instead of being timed again,
and ahead of the other problems' baselines, so problems end one after another.
The parent saves each unit's traces as it completes, so Ctrl-C or a crash loses at most the
units in flight (the run is then recorded as interrupted or failed), and a unit whose process
dies is retried once, then saved as failed traces. With a deadline (`deadline_s`) no unit starts
that could not end before it (the runner's rule, by the recent units' lengths), and a unit still
running at the deadline is stopped, its partial work dropped, so the run ends on time; the units
left are counted, and the next run does them, as it does whatever the store does not hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from solforge.bench.ahead import KernelsAhead
from solforge.bench.plan import BenchProblem
from solforge.data.solution import Solution
from solforge.data.trace import Status, Trace
from solforge.data.workload import Workload
from solforge.defaults import run_profile
from solforge.errors import SolforgeError
from solforge.hardware.profile import HardwareProfile
from solforge.harness.baseline import BASELINES, KINDS, reference_solution_name
from solforge.harness.evaluate import (
    EvalConfig,
    EvaluationRun,
    default_cache_dir,
    select_workloads,
)
from solforge.harness.phases import merge
from solforge.harness.sandbox import jit_ahead
from solforge.harness.session import Limits
from solforge.problem.suite import open_problem
from solforge.runners import RUNNERS, EvalTask, TaskResult, TaskRunner, open_runner
from solforge.solar.analysis import DEFAULT_FP32_POLICY, analyze_workload

if TYPE_CHECKING:
    from solforge.store import Store

# torch.compile on the CPU builds C++ for ~10 s per problem: allowed, but not the CPU default.
CPU_WORKLOADS = 1  # the CPU mode runs the smallest workload of each problem


@dataclass(frozen=True)
class BenchConfig:
    device: str  # "cuda" or "cpu"
    hardware: str | None = None  # the profile T_SOL is priced on; None: the GPU (H200 on a CPU)
    baseline: str = "best"  # T_b: eager | compile | best
    fresh: bool = False  # re-measure what the store already holds
    limits: Limits = field(default_factory=Limits)
    cache_dir: Path | None = None  # builds and baseline times; None: the harness default
    runner: str = "local"  # where the workers run: local or ray
    workers: int | None = None  # units at once; None: one per GPU (core), or the cluster's
    per_gpu: int = 1  # local runner: units sharing each GPU, their timed calls one at a time
    ray_address: str | None = None  # auto or HOST:PORT; None: a Ray instance of its own
    command: str = "solforge bench"
    library: bool = False  # also time the library baseline that fits each problem
    # From the run's start: start no unit expected to end later, stop those running then.
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise SolforgeError(f"--runner {self.runner}: unknown; the runners are "
                                f"{', '.join(RUNNERS)}")
        if self.baseline not in BASELINES:
            raise SolforgeError(f"--baseline {self.baseline}: unknown; choose from "
                                f"{', '.join(BASELINES)}")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise SolforgeError(f"a deadline of {self.deadline_s:g} s leaves no time to bench")


@dataclass(frozen=True)
class StoredProblem:
    """Where one problem's results sit in the store: what the summary reads back."""

    address: str
    tier: str | None
    workload_ids: dict[str, int]  # uuid -> id, the workloads benched
    solution_ids: dict[str, int]  # name -> id; the baselines as reference:eager / :compile


@dataclass(frozen=True)
class Unit:
    """One worker's work: the reference as one baseline kind, or one solution."""

    problem: BenchProblem
    label: str  # reference:<kind> or the solution's name
    kind: str | None  # the baseline kind, or None for a solution
    solution: Solution | None
    solution_id: int
    workloads: tuple[Workload, ...]  # those with no trace in the store yet

    def task(self, config: EvalConfig, key: str) -> EvalTask:
        """The unit as a runner's task: a bundled problem by address, any other by its folder."""
        planned = self.problem
        where = planned.address if planned.tier else str(planned.problem.root.resolve())
        config = replace(config, workloads=tuple(w.uuid for w in self.workloads))
        solution = self.solution.to_dict() if self.solution else None
        return EvalTask(where, config, solution, self.kind, key)


@dataclass(frozen=True)
class BenchOutcome:
    run_id: int
    device: str
    hardware: str  # what the traces were measured on
    profile: str  # what T_SOL was priced on
    problems: tuple[StoredProblem, ...]
    measured: int
    skipped: int
    interrupted: bool
    failures: tuple[str, ...]  # units or analyses that could not run, with the reason
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # the units', summed
    left: int = 0  # units the deadline kept from starting (baselines and solutions)


class Reporter(Protocol):
    """What the loop tells its caller; the CLI shows it as a progress bar."""

    def start(self, total: int, skipped: int) -> None: ...
    def working_on(self, text: str) -> None: ...
    def saved(self, trace: Trace) -> None: ...


class SilentReporter:
    def start(self, total: int, skipped: int) -> None:
        return None

    def working_on(self, text: str) -> None:
        return None

    def saved(self, trace: Trace) -> None:
        return None


def run_bench(problems: list[BenchProblem], store: Store, config: BenchConfig,
              reporter: Reporter | None = None) -> BenchOutcome:
    report = reporter or SilentReporter()
    began = time.monotonic()
    with open_runner(config.runner, config.device, config.workers,
                     config.ray_address, per_gpu=config.per_gpu) as runner:
        until = None if config.deadline_s is None else began + config.deadline_s
        if until is not None:
            runner.stop_starting_at(until)
        return _run(problems, store, config, runner, report, until)


def _run(problems: list[BenchProblem], store: Store, config: BenchConfig, runner: TaskRunner,
         report: Reporter, until: float | None) -> BenchOutcome:
    machine = runner.machine
    profile = run_profile(config.hardware, machine.profile)
    unit_config = eval_config(config, machine.device_type)
    device = torch.device(machine.device_type)
    stored, units, skipped = plan_units(problems, store, unit_config, device, machine.hardware,
                                        config.fresh)
    run_id = store.begin_run(config.command, device.type, profile.name,
                             machine.run_environment)
    recorder = Recorder(store, run_id, device.type, machine.hardware, report,
                        {s.address: s for s in stored})
    ahead = kernels_ahead(config, machine.device_type)
    dispatcher = UnitScheduler(runner, unit_config, report, ahead=ahead)
    failures: list[str] = []
    report.start(sum(len(unit.workloads) for unit in units), skipped)
    status = "failed"
    try:
        dispatcher.start(units)
        for problem in problems:  # the analyses run here while the units run in their slots
            failures += analyze(problem, recorder.stored[problem.address], store, profile,
                                config.fresh, report)
            failures += dispatcher.collect(recorder.save, timeout=0)
        failures += dispatcher.collect(recorder.save, until=until)
        status = "finished" if not dispatcher.left() else "stopped at its deadline"
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        if ahead is not None:
            ahead.close()
        store.finish_run(run_id, status, recorder.clocks.seen())
    return BenchOutcome(run_id, device.type, machine.hardware, profile.name, tuple(stored),
                        recorder.measured, skipped, status == "interrupted", tuple(failures),
                        merge(dispatcher.unit_phases), dispatcher.left())


@dataclass
class ClocksSeen:
    """The lowest and highest SM and memory clocks the timed traces report."""

    sm_mhz: list[float] = field(default_factory=list)
    mem_mhz: list[float] = field(default_factory=list)

    def add(self, trace: Trace) -> None:
        timing = trace.evaluation.timing
        if timing is None:
            return
        if timing.sm_clock_mhz:
            self.sm_mhz.extend(timing.sm_clock_mhz)
        if timing.mem_clock_mhz:
            self.mem_mhz.extend(timing.mem_clock_mhz)

    def seen(self) -> dict[str, Any]:
        clocks = {name: [min(values), max(values)]
                  for name, values in (("sm", self.sm_mhz), ("mem", self.mem_mhz)) if values}
        return {"clocks_seen_mhz": clocks} if clocks else {}


@dataclass
class Recorder:
    """Saves each trace as it comes (one commit each) and keeps count of what was saved."""

    store: Store
    run_id: int
    device: str
    hardware: str
    report: Reporter
    stored: dict[str, StoredProblem]  # by address
    measured: int = 0
    clocks: ClocksSeen = field(default_factory=ClocksSeen)

    def save(self, unit: Unit, trace: Trace) -> None:
        workload_id = self.stored[unit.problem.address].workload_ids[trace.workload["uuid"]]
        self.store.save_trace(self.run_id, workload_id, unit.solution_id, self.device,
                              self.hardware, trace.to_dict())
        self.measured += 1
        self.clocks.add(trace)
        self.report.saved(trace)


def kernels_ahead(config: BenchConfig, device_type: str) -> KernelsAhead | None:
    """The solutions' Triton kernels compiled ahead (bench/ahead.py): on a GPU, with the local
    runner, whose units look in this machine's harness cache."""
    if device_type != "cuda" or config.runner != "local":
        return None
    return KernelsAhead((config.cache_dir or default_cache_dir()) / jit_ahead.FOLDER)


def eval_config(config: BenchConfig, device_type: str) -> EvalConfig:
    """Each unit's configuration; the runner gives every unit a GPU of its own."""
    smallest = CPU_WORKLOADS if device_type == "cpu" else None
    return EvalConfig(device=device_type, hardware=config.hardware, baseline=config.baseline,
                      smallest=smallest, limits=config.limits, cache_dir=config.cache_dir,
                      reuse_baselines=not config.fresh, library=config.library)


def plan_units(problems: list[BenchProblem], store: Store, config: EvalConfig,
               device: torch.device, hardware: str,
               fresh: bool) -> tuple[list[StoredProblem], list[Unit], int]:
    """Record every problem, workload and solution, and list the work not yet in the store;
    also returns how many traces are already there (skipped)."""
    stored: list[StoredProblem] = []
    units: list[Unit] = []
    skipped = 0
    for planned in problems:
        problem = planned.problem
        problem_id = store.problem_id(planned.address, problem, planned.tier)
        workloads = select_workloads(problem, config, device)
        workload_ids = {w.uuid: store.workload_id(problem_id, w, problem.axes(w))
                        for w in workloads}
        roles = [(reference_solution_name(kind), kind, None) for kind in KINDS[config.baseline]]
        roles += [(solution.name, None, solution) for solution in planned.solutions]
        solution_ids = {}
        for label, kind, solution in roles:
            record = solution.to_dict() if solution else reference_solution(planned, kind)
            solution_id = store.solution_id(record)
            solution_ids[label] = solution_id
            todo = tuple(w for w in workloads if fresh or not store.has_trace(
                workload_ids[w.uuid], solution_id, device.type, hardware))
            skipped += len(workloads) - len(todo)
            if todo:
                units.append(Unit(planned, label, kind, solution, solution_id, todo))
        stored.append(StoredProblem(planned.address, planned.tier, workload_ids, solution_ids))
    return stored, units, skipped


def reference_solution(planned: BenchProblem, kind: str) -> dict[str, Any]:
    """The pseudo-solution a baseline is stored as: the reference's source under the name
    `reference:<kind>`, so a changed reference is a new solution and gets measured again."""
    return {"name": reference_solution_name(kind), "definition": planned.problem.name,
            "author": "solforge",
            "spec": {"languages": ["pytorch"], "entry_point": "reference.py::run",
                     "destination_passing_style": False, "baseline": kind},
            "sources": [{"path": "reference.py",
                         "content": planned.problem.definition.reference}]}


def analyze(planned: BenchProblem, stored: StoredProblem, store: Store,
            profile: HardwareProfile, fresh: bool, report: Reporter) -> list[str]:
    """Save the speed-of-light analysis of each benched workload; returns what failed."""
    failures = []
    for uuid, workload_id in stored.workload_ids.items():
        if not fresh and store.has_analysis(workload_id, profile.name, DEFAULT_FP32_POLICY):
            continue
        report.working_on(f"{planned.address}: T_SOL of {uuid[:8]}")
        try:
            analysis = analyze_workload(planned.problem, planned.problem.workload(uuid), profile)
        except SolforgeError as exc:
            failures.append(f"{planned.address} {uuid}: no T_SOL: {exc}")
            continue
        store.save_analysis(workload_id, analysis.to_json())
    return failures


@dataclass
class UnitScheduler:
    """Hands units to the runner and records what comes back: a problem's baselines first,
    its solutions once those are measured (their T_b then comes from the baseline cache). A
    baseline unit whose every workload is in the baseline store takes no process: its traces
    come from the store here, as its unit would have read them there."""

    runner: TaskRunner
    config: EvalConfig
    report: Reporter
    in_flight: dict[str, Unit] = field(default_factory=dict)  # by task key
    held: dict[str, list[Unit]] = field(default_factory=dict)  # solutions, by problem address
    baselines_left: dict[str, int] = field(default_factory=dict)  # by problem address
    unit_phases: list[dict] = field(default_factory=list)  # each ended unit's (phases.py)
    from_store: list[tuple[Unit, list[Trace]]] = field(default_factory=list)  # not yet saved
    ahead: KernelsAhead | None = None  # compiles the solutions' kernels in the units' order

    def start(self, units: list[Unit]) -> None:
        """Queue the work in the problems' order: a problem's baselines still to measure, or,
        where none is left (all stored), its solutions in the baselines' place. Queued after
        every other problem's baselines instead, a problem whose baselines an earlier call
        measured never got its solutions started before a deadline (H200, 2026-12-03: 3 of
        the first 16 shipped problems)."""
        to_measure: dict[str, list[Unit]] = {}
        for unit in units:
            address = unit.problem.address
            queued = to_measure.setdefault(address, [])
            if unit.kind is None:
                self.held.setdefault(address, []).append(unit)
                if self.ahead is not None and unit.solution is not None:
                    self.ahead.submit(unit.solution, unit.problem.problem, unit.workloads)
            elif (stored := stored_baseline_traces(unit, self.config)) is not None:
                self.from_store.append((unit, stored))
                self.report.working_on(f"{address}: {unit.label}: from the baseline store")
            else:
                self.baselines_left[address] = self.baselines_left.get(address, 0) + 1
                queued.append(unit)
        for address, baselines in to_measure.items():
            for unit in baselines:
                self._submit(unit)
            if not baselines:
                self._release(address, first=False)

    def collect(self, save: Callable[[Unit, Trace], None], timeout: float | None = None,
                until: float | None = None) -> list[str]:
        """Record every unit that ends, waiting up to `timeout` seconds for each (None: until
        none is left); at `until` (a time.monotonic()) the units still running are stopped and
        left for the next run (`TaskRunner.abandon`). Returns what failed."""
        failures = []
        while self.from_store:
            unit, traces = self.from_store.pop(0)
            for trace in traces:
                save(unit, trace)
        while (result := self._next_result(timeout, until)) is not None:
            unit = self.in_flight.pop(result.task.key)
            if self.ahead is not None and unit.solution is not None:
                self.ahead.ended(unit.solution)
            failures += record(unit, result, save)
            self.unit_phases.append(result.phases)
            self.report.working_on(f"{unit.problem.address}: {unit.label}: done on "
                                   f"{result.slot} in {result.seconds:.1f} s")
            address = unit.problem.address
            if unit.kind is not None:
                self.baselines_left[address] -= 1
                if self.baselines_left[address] == 0:
                    self._release(address)
        return failures

    def _next_result(self, timeout: float | None, until: float | None) -> TaskResult | None:
        while True:
            wait = timeout
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    if self.runner.pending:
                        self.runner.abandon()
                    return None
                wait = left if timeout is None else min(timeout, left)
            result = self.runner.next_result(wait)
            if result is not None or timeout is not None or not self.runner.pending:
                return result

    def left(self) -> int:
        """Units not done: withdrawn by the runner's deadline (never started, or stopped at
        it), or solutions held behind a baseline it withdrew."""
        return len(self.runner.withdrawn) + sum(len(units) for units in self.held.values())

    def _release(self, address: str, first: bool = True) -> None:
        """A problem's solutions, once its baselines are in: ahead of the other problems'
        baselines still waiting, so problems end one after another (a run stopped by its
        deadline leaves whole problems done, not every problem's baselines)."""
        units = self.held.pop(address, [])
        for unit in reversed(units) if first else units:
            self._submit(unit, first)

    def _submit(self, unit: Unit, first: bool = False) -> None:
        key = f"{unit.problem.address}:{unit.label}"  # one unit per role and problem
        self.in_flight[key] = unit
        self.runner.submit(unit.task(self.config, key), first)
        self.report.working_on(f"{unit.problem.address}: {unit.label}: submitted")


def stored_baseline_traces(unit: Unit, config: EvalConfig) -> list[Trace] | None:
    """The traces a baseline unit would return from the baseline store without timing anything
    (evaluate_reference's first step), read in this process: on a warm machine a unit process
    (seconds to start, H200 2026-12-02: 10 of a warm sample's units, 1.3 s each) would do
    nothing else, and the solutions behind it wait for it. None, and the unit runs as before,
    when any workload is missing or the store cannot be read here."""
    if unit.kind is None or not config.reuse_baselines:
        return None
    task = unit.task(config, "")
    try:
        run = EvaluationRun(open_problem(task.problem), task.config)
        return run.stored_reference_traces(unit.kind)
    except Exception:  # whatever it is, the unit meets it again and reports it
        return None


def record(unit: Unit, result: TaskResult, save: Callable[[Unit, Trace], None]) -> list[str]:
    """Save a unit's traces (a lost unit's are its failure records); returns what failed."""
    name = f"{unit.problem.address} {unit.label}"
    if result.error is not None:
        return [f"{name}: {result.error}"]
    for trace in result.traces:
        save(unit, trace)
    if result.lost is not None:
        return [f"{name}: its process died on each of {result.attempts} attempts (last: "
                f"{result.lost}); saved as {Status.RUNTIME_ERROR.value}"]
    return []
