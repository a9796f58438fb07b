"""Evaluate a solution on the workloads of a problem: the trusted driver.

The driver never runs candidate code. It builds the solution (C++ in a separate compile
process), runs the candidate in a worker process that it leads workload by workload (judge.py),
computes every reference itself and compares; then it holds each passing time to the
speed-of-light floor, times the reference the same way for T_b (only for the workloads that
passed), and writes one trace per workload. `evaluate_reference` times the reference alone, as
the traces of the pseudo-solutions `reference:eager` and `reference:compile`.

Defaults per device: on a GPU 5 correctness rounds, 10 warm-up calls, then timed calls until
the median is known to 1% (at least 20, at most 50; timing.StopRule), 8 timed outputs
re-checked, every workload; on the CPU 3 rounds, 2 + 10 calls, 3 re-checked, the two
smallest workloads (the same pipeline, labelled CPU timings, no SOL score).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from solforge.data.solution import Solution
from solforge.data.trace import (
    BaselineReport,
    Environment,
    Evaluation,
    Performance,
    Status,
    TimingReport,
    Trace,
)
from solforge.data.workload import Workload
from solforge.defaults import resolve_device, resolve_profile
from solforge.errors import SolforgeError
from solforge.failures import failure_cause
from solforge.harness import compare, compile_ahead, protocol
from solforge.harness.baseline import (
    BASELINES,
    KINDS,
    BaselineCache,
    cache_key,
    choose,
    reference_solution_name,
)
from solforge.harness.build import BuildFailure, build_solution
from solforge.harness.compile_ahead import CompileAhead
from solforge.harness.judge import Plan, WorkloadResult
from solforge.harness.library_baselines import (
    LibraryBaseline,
    library_baseline,
    score_against_library,
)
from solforge.harness.oracle import ReferenceOracle
from solforge.harness.phases import phase
from solforge.harness.sandbox import jit_ahead
from solforge.harness.seeds import SeedPlan, draw_secret
from solforge.harness.session import Limits
from solforge.harness.sol import SpeedOfLight, below_floor, score, speed_of_light
from solforge.harness.supervisor import RoleRun, Supervisor, worker_env
from solforge.measure.environment import environment, run_environment
from solforge.measure.timing import METHODS
from solforge.problem.problem import Problem

# (rounds, warm-up, timed iterations (the most), re-checked timed outputs) per device type.
DEFAULTS = {"cuda": (5, 10, 50, 8), "cpu": (3, 2, 10, 3)}
# The fewest timed iterations of an adaptive timing per device type (0: a fixed count).
MIN_ITERATIONS = {"cuda": 20, "cpu": 0}
# A screened candidate's timing per device type (EvalConfig.screen): (warm-up, the most timed
# calls, the fewest; 0: a fixed count). The optimizer's racing: 13 to 23 calls a workload on a
# GPU instead of 30 to 60, a less precise median for candidates that are then timed in full
# only if they come near the best (forge/loop.py).
SCREEN = {"cuda": (3, 20, 10), "cpu": (1, 5, 0)}
SCREEN_LABEL = "; screened: a brief timing (the optimizer's racing), not the full one"
CPU_SMALLEST = 2
# The CPU default skips workloads past this many input elements (generating a 128256 x 4096
# embedding table alone takes ~11 s there); the smallest workload always runs.
CPU_INPUT_ELEMENTS = 1 << 25
BASELINE_ROUNDS, BASELINE_VERIFY = 1, 2  # the reference is trusted: one sanity round
# Processes compiling one unit's compile baseline ahead from the runner's pool, which runs a few
# such units at once.
COMPILE_AHEAD_PER_UNIT = 4
TIMING_LABELS = {
    "kernel": "GPU kernel time: profiler records on every stream, first start to last end "
              "of each call; host launch cost excluded; cold L2",
    "events": "GPU time between CUDA events around each call, device-wide sync; launch cost "
              "included; cold L2",
    "graph": "GPU time of each call replayed from a CUDA graph; cold L2",
    "cpu": "CPU wall time of each call (perf_counter): a CPU timing, not comparable with GPU "
           "times and not scored against T_SOL",
}
_FORGED_RECORD = re.compile(r'"status"\s*:\s*"(' + "|".join(s.value for s in Status) + r')"')

Progress = Callable[[str], None]


@dataclass(frozen=True)
class EvalConfig:
    device: str = "cuda"
    hardware: str | None = None  # a catalog name, NAME@MHz or a profile file; None: detect
    baseline: str = "best"  # eager | compile | best
    workloads: tuple[str, ...] = ()  # uuids (or prefixes); empty: all (GPU), smallest (CPU)
    smallest: int | None = None  # only the N smallest workloads
    rounds: int | None = None  # None: the device's default (DEFAULTS)
    warmup: int | None = None
    iterations: int | None = None  # adaptive timing: the most
    min_iterations: int | None = None  # None: the device's; 0: exactly `iterations`
    verify: int | None = None
    timing: str = "kernel"  # GPU timing method; the CPU always uses "cpu"
    seed: int = 0  # the public seed; a secret drawn per run is mixed in
    secret: int | None = None  # fixed only in tests
    limits: Limits = field(default_factory=Limits)
    compile_timeout_s: float = 600.0
    max_restarts: int = 2
    cache_dir: Path | None = None  # builds and measured baselines; None: ~/.cache/solforge
    reuse_baselines: bool = True
    library: bool = False  # also time the library baseline that fits (library_baselines.py)
    # Compile the torch.compile baseline's graphs ahead in parallel processes
    # (compile_ahead.py). Off by default: on the H200 (2026-12-05) the worker's first calls
    # took as long with the graphs compiled ahead (6.16 s against 6.09 s over six RMSNorm
    # workloads), and waiting for them added 17.8 s to a cold evaluation.
    compile_ahead: bool = False
    # Time the candidate briefly (SCREEN) instead of by `warmup`/`iterations`/`min_iterations`:
    # the optimizer's first look. Correctness rounds, re-checked outputs and the baselines (their
    # plan, their stored times) are those of the full plan.
    screen: bool = False


def evaluate(problem: Problem, solution: Solution, config: EvalConfig = EvalConfig(),
             progress: Progress | None = None) -> list[Trace]:
    """One trace per selected workload, in the problem's order."""
    report = progress or _silent
    run = EvaluationRun(problem, config)
    report(f"{solution.name}: {len(run.workloads)} workloads on {run.device}")
    run.prepare_workers(1 + bool(run.missing_baselines()))
    candidate = run.candidate(solution, report)
    sols = {w.uuid: run.speed_of_light(w) for w in run.workloads}
    results = disqualify({uuid: run.hold_to_floor(result, sols[uuid])
                          for uuid, result in _reject_forged_prints(candidate).items()})
    passed = [w for w in run.workloads if results[w.uuid].status is Status.PASSED]
    baselines = run.baselines(passed, report) if passed else {}
    if config.library and passed:
        baselines = run.with_library(baselines, passed, report)
    traces = []
    for workload in run.workloads:
        evaluation = run.evaluation(results[workload.uuid], sols[workload.uuid],
                                    baselines.get(workload.uuid), candidate.log,
                                    run.candidate_plan)
        evaluation = replace(evaluation, build_seconds=run.build_seconds)
        report(f"{workload.uuid[:8]} {evaluation.status.value}")
        traces.append(Trace(problem.name, solution.name, workload.to_dict(), evaluation))
    return traces


def evaluate_reference(problem: Problem, kind: str, config: EvalConfig = EvalConfig(),
                       progress: Progress | None = None) -> list[Trace]:
    """The reference itself, timed as baseline `kind` ("eager" or "compile") exactly as
    `evaluate` times T_b: one trace per selected workload, from the pseudo-solution
    `reference:<kind>`. Every passing time goes into the baseline cache, so solutions evaluated
    afterwards with the same configuration reuse it. Each trace is scored against the eager
    time (timed here, or cached for "compile"): the S of torch.compile over eager PyTorch."""
    if kind not in KINDS["best"]:
        raise SolforgeError(f"unknown reference kind {kind!r} (eager or compile)")
    report = progress or _silent
    run = EvaluationRun(problem, config)
    name = reference_solution_name(kind)
    stored = run.stored_reference_traces(kind) if config.reuse_baselines else None
    if stored is not None:
        report(f"{name}: {len(stored)} workloads from the baseline store")
        return stored
    report(f"{name}: {len(run.workloads)} workloads on {run.device}")
    run.prepare_workers(1)
    timed = run.time_reference(kind, run.workloads, report)
    own = {uuid: _median_if_passed(result) for uuid, result in timed.results.items()}
    eager_kind = protocol.REFERENCE_EAGER
    eager = own if kind == eager_kind else run.cached_baselines(eager_kind, run.workloads)
    traces = []
    for workload in run.workloads:
        times = {eager_kind: eager[workload.uuid], kind: own[workload.uuid]}
        baseline = choose(eager_kind, times, cached=kind != eager_kind)
        sol = run.speed_of_light(workload)
        evaluation = run.evaluation(timed.results[workload.uuid], sol, baseline, timed.log)
        report(f"{workload.uuid[:8]} {evaluation.status.value}")
        traces.append(Trace(problem.name, name, workload.to_dict(), evaluation))
    run.store_reference_traces(kind, traces)
    return traces


class EvaluationRun:
    """One evaluation's shared state: device, workloads, plan, profile, workers."""

    def __init__(self, problem: Problem, config: EvalConfig) -> None:
        _check_choices(config)
        self.problem = problem
        self.config = config
        self.device = resolve_device(config.device)
        self.workloads = select_workloads(problem, config, self.device)
        self.plan = _plan(config, self.device)
        self.candidate_plan = _screened(self.plan, self.device) if config.screen else self.plan
        self.profile = resolve_profile(config.hardware, self.device)
        self.environment: Environment = environment(self.device)
        self.cache_dir = config.cache_dir or default_cache_dir()
        self.build_seconds: float | None = None  # set by candidate()
        self.library_notes: dict[str, str] = {}  # workload uuid -> why it has no library time
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.timing_method = "cpu" if self.device.type == "cpu" else config.timing
        self.supervisor = Supervisor(problem.root, self.device,
                                     ReferenceOracle(problem, self.device), self.timing_method,
                                     config.limits, config.max_restarts, self.cache_dir,
                                     self.cache_dir / jit_ahead.FOLDER)
        self.environment = environment(self.device, self.supervisor.sandbox_policy().active)

    def prepare_workers(self, count: int) -> None:
        """Have `count` workers waiting now, so they import and initialise while the driver
        builds and looks up (see pool.py); each is still used by one role only."""
        self.supervisor.prepare_workers(count)

    def missing_baselines(self) -> list[str]:
        """The baseline kinds some workload has no stored time for (all, without reuse)."""
        if not self.config.reuse_baselines:
            return list(KINDS[self.config.baseline])
        return [kind for kind in KINDS[self.config.baseline]
                if any(t is None for t in self.cached_baselines(kind, self.workloads).values())]

    def candidate(self, solution: Solution, report: Progress) -> RoleRun:
        started = time.perf_counter()
        try:
            with phase("build"):
                build = build_solution(solution, self.cache_dir / "builds", self.device.type,
                                       self.config.compile_timeout_s)
            self.build_seconds = 0.0 if build.cached else build.seconds
        except BuildFailure as failure:
            self.build_seconds = time.perf_counter() - started
            results = {w.uuid: WorkloadResult(w.uuid, failure.status, failure.message)
                       for w in self.workloads}
            return RoleRun(results, "")
        return self.supervisor.run(protocol.CANDIDATE, solution, build, self.candidate_plan,
                                   self.workloads, report)

    def hold_to_floor(self, result: WorkloadResult,
                      sol: SpeedOfLight | str) -> WorkloadResult:
        """A PASSED time under the physical floor (or with no device work) is a REWARD_HACK."""
        if result.status is not Status.PASSED:
            return result
        median = result.timing["median_ms"]
        evidence = None
        if self.device.type == "cuda" and median <= 0:
            evidence = "no device work was recorded in the timed calls"
        elif isinstance(sol, SpeedOfLight):
            evidence = below_floor(median, sol)
        if evidence is None:
            return result
        return replace(result, status=Status.REWARD_HACK, message=evidence, correctness=None)

    def baselines(self, workloads: list[Workload],
                  report: Progress) -> dict[str, BaselineReport | None]:
        """T_b per workload: from the cache, or timed in fresh workers (then cached). The
        torch.compile baseline's graphs are compiled ahead while the eager one is timed."""
        times: dict[str, dict[str, float | None]] = {w.uuid: {} for w in workloads}
        measured: set[str] = set()
        kinds = KINDS[self.config.baseline]
        cached = {kind: self.cached_baselines(kind, workloads) if self.config.reuse_baselines
                  else {} for kind in kinds}
        missing = {kind: [w for w in workloads if cached[kind].get(w.uuid) is None]
                   for kind in kinds}
        ahead = self.start_compile_ahead(missing.get(protocol.REFERENCE_COMPILE, []))
        try:
            for kind in kinds:
                if missing[kind] and kind != kinds[-1]:
                    self.prepare_workers(2)  # the next kind's worker starts while this one times
                results = (self.time_reference(kind, missing[kind], report, ahead).results
                           if missing[kind] else {})
                measured.update(results)
                for workload in workloads:
                    result = results.get(workload.uuid)
                    times[workload.uuid][kind] = (_median_if_passed(result) if result
                                                  else cached[kind].get(workload.uuid))
        finally:
            if ahead is not None:
                ahead.close()
        return {uuid: choose(self.config.baseline, kinds, cached=uuid not in measured)
                for uuid, kinds in times.items()}

    def start_compile_ahead(self, workloads: list[Workload]) -> CompileAhead | None:
        """The torch.compile baseline's graphs for `workloads`, compiled ahead in parallel
        processes (compile_ahead.py): where the configuration asks for it (off by default) and
        its worker has a sandbox to copy them into."""
        if not workloads or not self.compiles_ahead():
            return None
        root = self.cache_dir / compile_ahead.FOLDER
        with phase("compile_ahead"):
            return (compile_ahead.prepared(self.problem, workloads, self.device, root)
                    or compile_ahead.start_compile_ahead(self.problem, workloads, self.device,
                                                         root, worker_env(self.device.type)))

    def prepare_compile_ahead(self) -> Path | None:
        """Compile the torch.compile baseline's graphs for this run's workloads now, for the
        run that times it to find (the local runner calls this while the unit waits)."""
        if not self.compiles_ahead():
            return None
        return compile_ahead.prepare(self.problem, list(self.workloads), self.device,
                                     self.cache_dir / compile_ahead.FOLDER,
                                     worker_env(self.device.type),
                                     processes=COMPILE_AHEAD_PER_UNIT)

    def compiles_ahead(self) -> bool:
        return self.config.compile_ahead and self.supervisor.sandbox_policy().enabled

    def with_library(self, baselines: dict[str, BaselineReport | None],
                     workloads: list[Workload],
                     report: Progress) -> dict[str, BaselineReport | None]:
        """Each T_b report with the library baseline's time beside it. T_b itself and the SOL
        score stay as defined; a library that does not fit, is not installed or fails leaves a
        note on the traces, never a verdict."""
        found = library_baseline(self.problem.definition)
        if found is None:
            self.library_notes = {w.uuid: "library baseline: none fits this problem"
                                  for w in workloads}
            return baselines
        kind = f"library:{found.name}"
        times = (self.cached_baselines(kind, workloads) if self.config.reuse_baselines
                 else {w.uuid: None for w in workloads})
        missing = [w for w in workloads if times.get(w.uuid) is None]
        if missing:
            times.update(self.time_library(found, kind, missing, report))
        return {uuid: replace(b, library=found.name, library_ms=times.get(uuid)) if b else None
                for uuid, b in baselines.items()}

    def time_library(self, found: LibraryBaseline, kind: str, workloads: list[Workload],
                     report: Progress) -> dict[str, float | None]:
        """Judge the library's solution like a candidate (built, checked for correctness,
        timed the same way; trusted, so with the reference's single correctness round) and
        cache every passing time under `kind`."""
        report(f"timing the library baseline ({found.name}) on {len(workloads)} workloads")
        plan = replace(self.plan, rounds=BASELINE_ROUNDS, verify=BASELINE_VERIFY)
        with phase(kind, group=True):
            try:
                build = build_solution(found.solution, self.cache_dir / "builds",
                                       self.device.type, self.config.compile_timeout_s)
            except BuildFailure as failure:
                why = failure_cause(failure.message)
                self.library_notes = {w.uuid: f"library baseline {found.name}: {why}"
                                      for w in workloads}
                return {}
            run = self.supervisor.run(protocol.CANDIDATE, found.solution, build, plan,
                                      workloads, _silent)
        times = {}
        with phase("baseline_store"):
            cache = BaselineCache(self.cache_dir / "baselines.jsonl")
            for workload in workloads:
                result = run.results[workload.uuid]
                times[workload.uuid] = median_ms = _median_if_passed(result)
                if median_ms is not None:
                    cache.put(*self._cache_key(workload, kind), median_ms=median_ms)
                else:
                    self.library_notes[workload.uuid] = (
                        f"library baseline {found.name}: {result.status.value}: "
                        f"{failure_cause(result.message)}")
        return times

    def time_reference(self, kind: str, workloads: list[Workload], report: Progress,
                       ahead: CompileAhead | None = None) -> RoleRun:
        """Time the reference as baseline `kind` in a fresh worker; cache every passing time.
        The compile baseline's worker gets the graphs compiled ahead (`ahead`, or started
        here), once they are."""
        report(f"timing the reference ({kind}) on {len(workloads)} workloads")
        plan = replace(self.plan, rounds=BASELINE_ROUNDS, verify=BASELINE_VERIFY)
        own = None
        if kind == protocol.REFERENCE_COMPILE and ahead is None:
            ahead = own = self.start_compile_ahead(workloads)
        try:
            with phase(kind, group=True):
                compiled = None
                if kind == protocol.REFERENCE_COMPILE and ahead is not None:
                    with phase("compile_ahead"):
                        outcome = ahead.wait()
                    done = sum(v == "compiled" for v in outcome.values())
                    report(f"torch.compile ahead: {done} of {len(workloads)} workloads")
                    compiled = ahead.folder
                run = self.supervisor.run(kind, None, None, plan, workloads, _silent, compiled)
        finally:
            if own is not None:
                own.close()
        with phase("baseline_store"):
            cache = BaselineCache(self.cache_dir / "baselines.jsonl")
            for workload in workloads:
                median_ms = _median_if_passed(run.results[workload.uuid])
                if median_ms is not None:
                    cache.put(*self._cache_key(workload, kind), median_ms=median_ms)
        return run

    def cached_baselines(self, kind: str, workloads: list[Workload]) -> dict[str, float | None]:
        with phase("baseline_store"):
            cache = BaselineCache(self.cache_dir / "baselines.jsonl")
            return {w.uuid: cache.get(self._cache_key(w, kind)[0]) for w in workloads}

    def speed_of_light(self, workload: Workload) -> SpeedOfLight | str:
        """T_SOL and the floor of `workload` on this run's profile: analysed once (tracing
        the reference costs seconds) and kept in the signed store beside the baselines, since
        the floor decides what is a REWARD_HACK."""
        with phase("sol"):
            store = BaselineCache(self.cache_dir / "sol.jsonl", value="t_sol_ms")
            material = {"definition": self.problem.definition.to_dict(),
                        "workload": workload.to_dict(), "profile": repr(self.profile),
                        "analysis": _analysis_version()}
            key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str)
                                 .encode()).hexdigest()
            entry = store.entries().get(key)
            if entry is not None:
                return SpeedOfLight(entry["t_sol_ms"], entry["floor_ms"], entry["bound"],
                                    entry["hardware"])
            found = speed_of_light(self.problem, workload, self.profile)
            if isinstance(found, SpeedOfLight):
                store.write([{"key": key, **asdict(found)}])
            return found

    def warm_comparisons(self) -> int:
        """Make the comparison's GPU kernel ready for this run's outputs (compare_kernel.py):
        a spare unit does it while it waits, so that no comparison under the GPU's shared lock
        compiles it or hashes Triton. The kernel variants made (0 off a GPU)."""
        if self.device.type != "cuda" or not compare.one_pass_trusted(self.device):
            return 0
        from solforge.harness import compare_kernel

        dtypes = {spec.dtype.torch_dtype for spec in self.problem.definition.outputs.values()}
        rules = {workload.tolerance.allow_negative_inf for workload in self.workloads}
        return compare_kernel.warm_up(dtypes, rules, self.device)

    def stored_reference_traces(self, kind: str) -> list[Trace] | None:
        """The traces of baseline `kind` on every selected workload from the baseline store,
        or None when one is missing: a warm bench times no baseline again."""
        with phase("baseline_store"):
            entries = BaselineCache(self.cache_dir / "baselines.jsonl").entries()
            found = [entries.get(self._cache_key(w, kind)[0], {}).get("trace")
                     for w in self.workloads]
            if not all(isinstance(t, dict) for t in found):
                return None
            try:
                return [Trace.from_dict(t) for t in found]
            except (KeyError, TypeError, ValueError):
                return None

    def store_reference_traces(self, kind: str, traces: list[Trace]) -> None:
        """Keep each passing baseline trace beside its time in the store."""
        with phase("baseline_store"):
            cache = BaselineCache(self.cache_dir / "baselines.jsonl")
            entries = []
            for workload, trace in zip(self.workloads, traces):
                if trace.evaluation.status is Status.PASSED and trace.evaluation.timing:
                    key, description = self._cache_key(workload, kind)
                    entries.append({"key": key, "median_ms": trace.evaluation.timing.median_ms,
                                    **description, "trace": trace.to_dict()})
            cache.write(entries)

    def _cache_key(self, workload: Workload, kind: str) -> tuple[str, dict[str, object]]:
        return cache_key(self.problem, workload, kind, self._cache_context())

    def _cache_context(self) -> dict[str, object]:
        return {**_machine_facts(str(self.device)), "method": self.timing_method,
                "warmup": self.plan.warmup,
                "iterations": self.plan.iterations,
                "min_iterations": self.plan.min_iterations,
                "hardware": self.environment.hardware,
                "libs": self.environment.libs}

    def evaluation(self, result: WorkloadResult, sol: SpeedOfLight | str,
                   baseline: BaselineReport | None, log: str,
                   plan: Plan | None = None) -> Evaluation:
        """The trace's evaluation of one workload's result, timed by `plan` (this run's full
        plan unless given: the candidate's may be screened)."""
        notes = [sol] if isinstance(sol, str) else []
        timing = self._timing_report(result, plan or self.plan)
        performance = sol_score = library_score = None
        if result.status is Status.PASSED:
            latency = timing.median_ms
            reference = baseline.latency_ms if baseline else 0.0
            performance = Performance(latency, reference, reference / latency if latency else 0.0)
            sol_score, note = self._score(latency, baseline, sol)
            notes += [note] if note else []
            library_score = self._library_score(latency, baseline, sol)
            library_note = self.library_notes.get(result.uuid)
            notes += [library_note] if library_note else []
        known = sol if isinstance(sol, SpeedOfLight) else None
        return Evaluation(
            status=result.status, environment=self.environment, timestamp=_now(),
            log="" if result.status is Status.PASSED else _failure_log(result.message, log),
            correctness=result.correctness if result.status in _WITH_CORRECTNESS else None,
            performance=performance,
            t_sol_ms=known.t_sol_ms if known else None,
            sol_floor_ms=known.floor_ms if known else None,
            sol_bound=known.bound if known else None,
            sol_hardware=known.hardware if known else None,
            sol_score=sol_score, library_score=library_score, timing=timing,
            baseline=baseline if result.status is Status.PASSED else None,
            evidence=result.message if result.status is Status.REWARD_HACK else None,
            notes=tuple(notes),
        )

    def _score(self, latency_ms: float, baseline: BaselineReport | None,
               sol: SpeedOfLight | str) -> tuple[float | None, str | None]:
        if self.device.type == "cpu":
            return None, "CPU timing: no SOL score"
        if not isinstance(sol, SpeedOfLight):
            return None, None
        return score(latency_ms, baseline.latency_ms if baseline else None, sol)

    def _library_score(self, latency_ms: float, baseline: BaselineReport | None,
                       sol: SpeedOfLight | str) -> float | None:
        """S against the library: T_b replaced by the library's time (GPU timings only)."""
        if (self.device.type == "cpu" or not isinstance(sol, SpeedOfLight) or baseline is None
                or baseline.library_ms is None):
            return None
        return score_against_library(latency_ms, baseline.library_ms, sol.t_sol_ms)

    def _timing_report(self, result: WorkloadResult, plan: Plan) -> TimingReport | None:
        timing = result.timing
        if timing is None:
            return None
        label = TIMING_LABELS[timing["method"]] + (SCREEN_LABEL if plan.screened else "")
        return TimingReport(
            method=timing["method"], device=self.device.type,
            label=label, iterations=len(timing["times_ms"]),
            warmup=plan.warmup, median_ms=timing["median_ms"], min_ms=timing["min_ms"],
            max_ms=timing["max_ms"], spread=timing["spread"],
            sm_clock_mhz=timing.get("sm_clock_mhz"), mem_clock_mhz=timing.get("mem_clock_mhz"),
            kernels_per_iteration=timing.get("kernels_per_iteration"),
            first_call_ms=result.first_call_ms, verified_iterations=result.verified,
            handover=result.handover)


_WITH_CORRECTNESS = (Status.PASSED, Status.INCORRECT_NUMERICAL)


@functools.cache
def _machine_facts(device: str) -> dict[str, object]:
    """The driver and maximum SM clock that key stored baselines: read once per process (NVML
    or nvidia-smi), since `bench` opens a run per baseline unit to read the store."""
    found = run_environment(torch.device(device)) if device.startswith("cuda") else {}
    return {"driver": found.get("driver"), "max_sm_clock_mhz": found.get("max_sm_clock_mhz")}


@functools.cache
def _analysis_version() -> str:
    """A digest of the analysis code (solar/, sol.py): a changed analysis is a new T_SOL."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted([*(root / "solar").glob("*.py"), root / "harness" / "sol.py",
                        *(root / "hardware").glob("*.py")]):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _check_choices(config: EvalConfig) -> None:
    if config.baseline not in BASELINES:
        raise SolforgeError(f"unknown baseline {config.baseline!r} "
                            f"(choose from {', '.join(BASELINES)})")
    if config.timing not in METHODS or config.timing == "cpu":
        raise SolforgeError(f"unknown GPU timing method {config.timing!r} "
                            f"(choose from kernel, events, graph)")


def _plan(config: EvalConfig, device: torch.device) -> Plan:
    rounds, warmup, iterations, verify = DEFAULTS[device.type]
    secret = draw_secret() if config.secret is None else config.secret
    most = config.iterations or iterations
    fewest = (MIN_ITERATIONS[device.type] if config.min_iterations is None
              else config.min_iterations)
    return Plan(SeedPlan(secret, config.seed), config.rounds or rounds,
                warmup if config.warmup is None else config.warmup, most,
                verify if config.verify is None else config.verify,
                min_iterations=fewest if 0 < fewest < most else 0)


def _screened(plan: Plan, device: torch.device) -> Plan:
    """`plan` with the candidate's brief timing (SCREEN); its rounds and checks unchanged."""
    warmup, most, fewest = SCREEN[device.type]
    return replace(plan, warmup=warmup, iterations=most, min_iterations=fewest, screened=True)


def _median_if_passed(result: WorkloadResult) -> float | None:
    return result.timing["median_ms"] if result.status is Status.PASSED else None


def _reject_forged_prints(run: RoleRun) -> dict[str, WorkloadResult]:
    """A candidate that printed something shaped like a result record tried to fake one."""
    match = _FORGED_RECORD.search(run.log)
    if match is None:
        return run.results
    evidence = f"printed a forged result record to stdout/stderr: {match.group(0)!r}"
    return {uuid: result if result.status is not Status.PASSED else
            replace(result, status=Status.REWARD_HACK, message=evidence, correctness=None)
            for uuid, result in run.results.items()}


def disqualify(results: dict[str, WorkloadResult]) -> dict[str, WorkloadResult]:
    """A solution caught cheating on any workload is a REWARD_HACK on every workload, earlier
    ones included: a cheat that starts after N calls must not keep the verdicts it won before."""
    caught = next(((uuid, r) for uuid, r in results.items()
                   if r.status is Status.REWARD_HACK and not r.message.startswith(_UNEVALUATED)),
                  None)
    if caught is None:
        return results
    uuid, hack = caught
    evidence = f"disqualified: caught cheating on workload {uuid}: {hack.message}"
    return {key: result if result.status is Status.REWARD_HACK else
            replace(result, status=Status.REWARD_HACK, message=evidence, correctness=None)
            for key, result in results.items()}


_UNEVALUATED = "not evaluated"


def select_workloads(problem: Problem, config: EvalConfig,
                     device: torch.device) -> list[Workload]:
    if config.workloads:
        chosen = {problem.workload(uuid).uuid for uuid in config.workloads}
    else:
        count = config.smallest or (CPU_SMALLEST if device.type == "cpu" else None)
        ordered = sorted(problem.workloads, key=problem.input_elements)
        if device.type == "cpu" and not config.smallest:  # the smallest always, then what fits
            ordered = ordered[:1] + [w for w in ordered[1:]
                                     if problem.input_elements(w) <= CPU_INPUT_ELEMENTS]
        chosen = {w.uuid for w in (ordered[:count] if count else ordered)}
    return [w for w in problem.workloads if w.uuid in chosen]


def default_cache_dir() -> Path:
    return Path(os.environ.get("SOLFORGE_CACHE", Path.home() / ".cache" / "solforge"))


def _failure_log(message: str, log: str, chars: int = 4000) -> str:
    tail = log if len(log) <= chars else "..." + log[-chars:]
    return f"{message}\n--- worker output (tail) ---\n{tail}" if tail.strip() else message


def _silent(message: str) -> None:
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
