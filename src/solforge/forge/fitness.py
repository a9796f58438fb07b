"""A candidate's verdict over its workloads: one status, one fitness, for the archive.

On a GPU the fitness is the mean SOL score over the workloads (1 at the speed of light, 0.5 at
the baseline). On the CPU there is no score (CPU timings are not priced against T_SOL), so the
fitness is the geometric-mean speedup over the baseline there, and says so (`kind`). Both are
solforge.score.rank's, the convention bench and the report rank solutions by. A candidate
that is not PASSED everywhere has no fitness; a REWARD_HACK anywhere makes it a REWARD_HACK.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from solforge.data.trace import Status, Trace
from solforge.score.rank import rate_traces

SOL_SCORE, SPEEDUP = "sol_score", "speedup"


@dataclass(frozen=True)
class Verdict:
    status: str
    fitness: float | None
    kind: str  # SOL_SCORE or SPEEDUP
    latency_ms: float | None  # median T_k over the workloads
    evidence: str | None  # why it is not PASSED


def verdict(traces: list[Trace]) -> Verdict:
    if not traces:
        return Verdict(Status.RUNTIME_ERROR.value, None, SOL_SCORE, None, "no traces")
    hacks = [t for t in traces if t.status is Status.REWARD_HACK]
    failed = hacks or [t for t in traces if t.status is not Status.PASSED]
    if failed:
        first = failed[0].evaluation
        evidence = first.evidence or first.log or first.status.value
        return Verdict(first.status.value, None, SOL_SCORE, None, evidence[:2000])
    latency_ms = statistics.median(t.evaluation.performance.latency_ms for t in traces)
    rating = rate_traces(traces)
    if all(t.evaluation.sol_score is not None for t in traces):
        return Verdict(Status.PASSED.value, rating.sol_score, SOL_SCORE, latency_ms, None)
    return Verdict(Status.PASSED.value, rating.speedup, SPEEDUP, latency_ms, None)


@dataclass(frozen=True)
class WorkloadResult:
    """One workload's share of a verdict: what per-shape composition compares candidates by."""

    workload: str  # uuid
    status: str
    latency_ms: float | None  # T_k, PASSED only
    sol_score: float | None  # GPU only


def workload_results(traces: list[Trace]) -> list[WorkloadResult]:
    """Each trace's workload, status, T_k and S (the last trace wins for a repeated uuid)."""
    found: dict[str, WorkloadResult] = {}
    for trace in traces:
        evaluation = trace.evaluation
        performance = evaluation.performance
        uuid = str(trace.workload.get("uuid", "?"))
        found[uuid] = WorkloadResult(uuid, evaluation.status.value,
                                     performance.latency_ms if performance else None,
                                     evaluation.sol_score)
    return list(found.values())
