"""What the report shows, read once from the results store into frozen records.

The store keeps one row per fact (one trace per solution, workload and GPU); the report needs them
side by side: for each workload measured on one platform, its speed-of-light analysis, the two
reference baselines and every candidate. `gather` builds exactly that, so nothing downstream
touches the database.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solforge.data.trace import Status
from solforge.errors import HardwareError, SolforgeError

if TYPE_CHECKING:
    from solforge.store import Store
    from solforge.store.schema import AnalysisRow, ProblemRow, Run, SolutionRow, TraceRow

# The reference timed as a solution: the store records the baselines under these names.
EAGER_SOLUTION = "reference:eager"
COMPILE_SOLUTION = "reference:compile"
PASSED = Status.PASSED.value


class ReportError(SolforgeError):
    """A store the report cannot be made from: missing, empty, or without the runs asked for."""


@dataclass(frozen=True)
class RunInfo:
    id: int
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    status: str
    command: str
    device: str  # "cuda" or "cpu"
    hardware: str  # the profile T_SOL was priced on
    environment: dict[str, Any]  # GPU, driver, versions, as the bench recorded them
    platforms: tuple[str, ...]  # what its traces were measured on


@dataclass(frozen=True)
class WorkloadAnalysis:
    """The analysis of one workload on one hardware profile (the fields the report uses)."""

    hardware: str
    fp32_policy: str
    t_sol_ms: float
    flops: float  # every unit together
    flops_by_unit: dict[str, float]  # keyed by the profile unit whose peak prices them
    bytes_fused: float
    bound: str  # "compute" or "memory"

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity: FLOPs per byte of fused DRAM traffic; None without traffic."""
        return self.flops / self.bytes_fused if self.bytes_fused > 0 else None


@dataclass(frozen=True)
class SolutionRun:
    """One candidate solution's trace on one workload."""

    solution: str  # its name (with its hash when another solution of the problem has it)
    author: str
    status: str
    latency_ms: float | None  # the measured median; only for PASSED


@dataclass(frozen=True)
class MeasuredWorkload:
    """One workload of one problem measured on one platform (a GPU, or the CPU)."""

    problem: str  # the problem's address, tier/name
    tier: str | None
    workload: str  # uuid
    device: str  # "cuda" or "cpu"
    platform: str  # what the traces were measured on: the GPU's name, or CPU_<arch>
    sol: WorkloadAnalysis | None  # None when the store holds no analysis for it
    eager_ms: float | None
    compile_ms: float | None
    candidates: tuple[SolutionRun, ...]

    @property
    def cpu_timing(self) -> bool:
        return self.device == "cpu"

    @property
    def baseline_ms(self) -> float | None:
        """T_b: the faster of the two reference baselines that were timed."""
        timed = [ms for ms in (self.eager_ms, self.compile_ms) if ms is not None]
        return min(timed) if timed else None


@dataclass(frozen=True)
class ReportData:
    url: str  # the store, password hidden
    runs: tuple[RunInfo, ...]
    results: tuple[MeasuredWorkload, ...]


def gather(store: Store, run_ids: Sequence[int] = ()) -> ReportData:
    """Every trace of the store (or of the runs `run_ids`), grouped by workload and platform."""
    from sqlalchemy.engine import make_url

    from solforge.store.schema import (
        AnalysisRow,
        ProblemRow,
        Run,
        SolutionRow,
        TraceRow,
        WorkloadRow,
    )

    shown = make_url(store.url).render_as_string(hide_password=True)
    runs = {run.id: run for run in store.rows(Run)}
    missing = sorted(set(run_ids) - set(runs))
    if missing:
        raise ReportError(f"{shown} has no run {', '.join(map(str, missing))} "
                          f"(runs: {', '.join(map(str, runs)) or 'none'})")
    traces = [t for t in store.rows(TraceRow) if not run_ids or t.run_id in run_ids]
    if not traces:
        scope = f" for run {', '.join(map(str, run_ids))}" if run_ids else ""
        raise ReportError(f"{shown} holds no traces{scope}: record results with "
                          f"`solforge bench` first")
    problems = {row.id: row for row in store.rows(ProblemRow)}
    workloads = {row.id: row for row in store.rows(WorkloadRow)}
    solutions = {row.id: row for row in store.rows(SolutionRow)}
    labels = _solution_labels(solutions.values())
    analyses: dict[tuple[int, str], list[AnalysisRow]] = {}
    for row in store.rows(AnalysisRow):
        analyses.setdefault((row.workload_id, row.hardware), []).append(row)

    groups: dict[tuple[int, str, str], list[TraceRow]] = {}
    for trace in traces:
        groups.setdefault((trace.workload_id, trace.hardware, trace.device), []).append(trace)
    results = []
    for (workload_id, platform, device), group in groups.items():
        workload = workloads[workload_id]
        sol = _speed_of_light(analyses.get((workload_id, _profile_name(group, runs)), []))
        results.append(_workload_result(problems[workload.problem_id], workload.uuid, device,
                                        platform, sol, group, solutions, labels))
    shown_runs = sorted(set(run_ids) or {t.run_id for t in traces if t.run_id is not None})
    return ReportData(url=shown, runs=tuple(_run_info(runs[i], traces) for i in shown_runs),
                      results=tuple(results))


def _workload_result(problem: ProblemRow, uuid: str, device: str, platform: str,
                     sol: WorkloadAnalysis | None, traces: list[TraceRow],
                     solutions: dict[int, SolutionRow], labels: dict[int, str]
                     ) -> MeasuredWorkload:
    baselines = (EAGER_SOLUTION, COMPILE_SOLUTION)
    candidates = [t for t in traces if solutions[t.solution_id].name not in baselines]
    return MeasuredWorkload(
        problem=problem.address, tier=problem.tier, workload=uuid, device=device,
        platform=platform, sol=sol,
        eager_ms=_baseline_ms(traces, solutions, EAGER_SOLUTION, [t.eager_ms for t in traces]),
        compile_ms=_baseline_ms(traces, solutions, COMPILE_SOLUTION,
                                [t.compile_ms for t in traces]),
        candidates=tuple(_candidate(t, solutions[t.solution_id], labels) for t in candidates),
    )


def _profile_name(traces: list[TraceRow], runs: dict[int, Run]) -> str | None:
    """The name of the hardware profile these traces' T_SOL was priced on (the name analyses
    are stored under): the one a trace record names, else the profile its run asked for."""
    from solforge.hardware import load_profile

    for trace in traces:
        named = trace.record.get("evaluation", {}).get("sol_hardware")
        if named:
            return named
    for trace in traces:
        if trace.run_id in runs:
            spec = runs[trace.run_id].hardware
            try:
                return load_profile(spec).name
            except HardwareError:
                return spec
    return None


def _speed_of_light(rows: list[AnalysisRow]) -> WorkloadAnalysis | None:
    """The analysis under the default float32 policy when there are several."""
    from solforge.solar.analysis import DEFAULT_FP32_POLICY

    if not rows:
        return None
    row = next((r for r in rows if r.fp32_policy == DEFAULT_FP32_POLICY), rows[0])
    counted = row.details.get("flops", {})
    priced_as = row.details.get("priced_as", {})
    flops_by_unit: dict[str, float] = {}
    for unit, flops in counted.items():
        priced = priced_as.get(unit, unit)
        flops_by_unit[priced] = flops_by_unit.get(priced, 0.0) + float(flops)
    return WorkloadAnalysis(hardware=row.hardware, fp32_policy=row.fp32_policy,
                            t_sol_ms=row.t_sol_ms, flops=row.flops, flops_by_unit=flops_by_unit,
                            bytes_fused=row.bytes_fused, bound=row.bound)


def _baseline_ms(traces: list[TraceRow], solutions: dict[int, SolutionRow], name: str,
                 recorded: list[float | None]) -> float | None:
    """The baseline's own PASSED trace; failing that, the time a candidate's trace recorded."""
    for trace in traces:
        if solutions[trace.solution_id].name == name and trace.status == PASSED:
            return trace.latency_ms
    return next((ms for ms in recorded if ms is not None), None)


def _candidate(trace: TraceRow, solution: SolutionRow, labels: dict[int, str]) -> SolutionRun:
    passed = trace.status == PASSED
    return SolutionRun(solution=labels[solution.id], author=solution.author, status=trace.status,
                       latency_ms=trace.latency_ms if passed else None)


def _solution_labels(solutions: Iterable[SolutionRow]) -> dict[int, str]:
    """Each solution's name, with the start of its hash where two solutions of one definition
    share a name."""
    rows = list(solutions)
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        counts[row.definition, row.name] = counts.get((row.definition, row.name), 0) + 1
    return {row.id: row.name if counts[row.definition, row.name] == 1
            else f"{row.name} ({row.source_hash[:8]})" for row in rows}


def _run_info(run: Run, traces: list[TraceRow]) -> RunInfo:
    platforms = sorted({t.hardware for t in traces if t.run_id == run.id})
    return RunInfo(id=run.id, started_at=run.started_at, finished_at=run.finished_at,
                   status=run.status, command=run.command, device=run.device,
                   hardware=run.hardware, environment=dict(run.environment or {}),
                   platforms=tuple(platforms))
