"""The numbers the report's tables and charts share: per-workload SOL scores, the best candidate
of each workload, and solutions ranked as solforge.score.rank ranks them (bench and the
optimizer rank the same way, so they name the same best solution).

- T_b is the faster of the two reference baselines (eager, torch.compile): bench's default;
  torch.compile's own score takes T_b = eager.
- CPU timings (`--device cpu`) get speedups, CPU against CPU, but never a SOL score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solforge.problem.suite import TIERS
from solforge.report.data import PASSED, MeasuredWorkload, SolutionRun
from solforge.score import ScoreError, sol_score, speedup
from solforge.score.rank import Rating, mean_sol_score, ranked_best_first, rate


@dataclass(frozen=True)
class Standing:
    """One solution over a set of workloads on one platform: a leaderboard row."""

    problem: str
    solution: str
    author: str
    platform: str
    cpu_timing: bool
    workloads: int
    passed: int
    failures: tuple[tuple[str, int], ...]  # (status, count), most frequent first
    mean_score: float | None  # None when no workload could be scored
    geomean_speedup: float | None  # over the faster baseline; None when none passed

    def rating(self) -> Rating:
        return Rating(self.mean_score, self.passed, self.geomean_speedup)


@dataclass(frozen=True)
class ProblemSummary:
    """One problem on one platform: a row of the per-problem table."""

    tier: str | None
    problem: str
    platform: str
    cpu_timing: bool
    workloads: int
    t_sol_ms: tuple[float, float] | None  # (lowest, highest) over the workloads
    eager_ms: tuple[float, float] | None
    compile_ms: tuple[float, float] | None
    compile_score: float | None  # torch.compile against eager, mean over the workloads
    best: Standing | None  # the best-ranked candidate on this problem


def candidate_score(result: MeasuredWorkload, candidate: SolutionRun) -> float | None:
    """S of one candidate on one workload (T_b the faster baseline), or None if undefined."""
    baseline_ms = result.baseline_ms
    if result.cpu_timing or result.sol is None or baseline_ms is None:
        return None
    if candidate.status != PASSED:
        return 0.0
    return _score_or_none(candidate.latency_ms, baseline_ms, result.sol.t_sol_ms)


def candidate_speedup(result: MeasuredWorkload, candidate: SolutionRun) -> float | None:
    """T_b / T_k for a candidate that passed; None otherwise."""
    baseline_ms = result.baseline_ms
    if candidate.latency_ms is None or baseline_ms is None:
        return None
    return speedup(baseline_ms, candidate.latency_ms)


def compile_score(result: MeasuredWorkload) -> float | None:
    """S of torch.compile with T_b = eager: how far compiling alone moves toward the bound."""
    if (result.cpu_timing or result.sol is None or result.eager_ms is None
            or result.compile_ms is None):
        return None
    return _score_or_none(result.compile_ms, result.eager_ms, result.sol.t_sol_ms)


def best_score(result: MeasuredWorkload) -> tuple[str, float] | None:
    """The candidate with the highest S on this workload and that S; None if none passed."""
    scored = [(candidate_score(result, c), c.solution) for c in result.candidates
              if c.status == PASSED]
    defined = [(score, name) for score, name in scored if score is not None]
    if not defined:
        return None
    score, name = max(defined)
    return name, score


def standings(results: Sequence[MeasuredWorkload]) -> list[Standing]:
    """Every solution of every problem, per platform, over its workloads; best first."""
    entries: dict[tuple[str, str, str], list[tuple[MeasuredWorkload, SolutionRun]]] = {}
    for result in results:
        for candidate in result.candidates:
            key = (result.problem, candidate.solution, result.platform)
            entries.setdefault(key, []).append((result, candidate))
    rows = [_standing(pairs) for _, pairs in sorted(entries.items())]
    return ranked_best_first(rows, Standing.rating)


def problem_summaries(results: Sequence[MeasuredWorkload]) -> list[ProblemSummary]:
    """One row per problem and platform, in suite order (tier, then name), GPUs before the
    CPU."""
    groups: dict[tuple[str, str], list[MeasuredWorkload]] = {}
    for result in results:
        groups.setdefault((result.problem, result.platform), []).append(result)
    rows = [_problem_summary(group) for group in groups.values()]
    return sorted(rows, key=lambda row: (tier_rank(row.tier), row.problem, row.cpu_timing,
                                          row.platform))


def tier_rank(tier: str | None) -> int:
    """The suite's tier order (l1, l2, quant, fib); other tiers after, untiered problems last."""
    if tier in TIERS:
        return TIERS.index(tier)
    return len(TIERS) if tier else len(TIERS) + 1


def _standing(pairs: list[tuple[MeasuredWorkload, SolutionRun]]) -> Standing:
    first_result, first = pairs[0]
    scores = [s for s in (candidate_score(r, c) for r, c in pairs) if s is not None]
    speedups = [s for s in (candidate_speedup(r, c) for r, c in pairs) if s is not None]
    passed = sum(c.status == PASSED for _, c in pairs)
    rating = rate(scores, passed, speedups)
    failures: dict[str, int] = {}
    for _, candidate in pairs:
        if candidate.status != PASSED:
            failures[candidate.status] = failures.get(candidate.status, 0) + 1
    return Standing(
        problem=first_result.problem, solution=first.solution, author=first.author,
        platform=first_result.platform, cpu_timing=first_result.cpu_timing, workloads=len(pairs),
        passed=passed,
        failures=tuple(sorted(failures.items(), key=lambda item: (-item[1], item[0]))),
        mean_score=rating.sol_score, geomean_speedup=rating.speedup,
    )


def _problem_summary(group: list[MeasuredWorkload]) -> ProblemSummary:
    first = group[0]
    ranked = standings(group)
    compile_scores = [s for s in map(compile_score, group) if s is not None]
    return ProblemSummary(
        tier=first.tier, problem=first.problem, platform=first.platform,
        cpu_timing=first.cpu_timing, workloads=len(group),
        t_sol_ms=_span([r.sol.t_sol_ms for r in group if r.sol is not None]),
        eager_ms=_span([r.eager_ms for r in group if r.eager_ms is not None]),
        compile_ms=_span([r.compile_ms for r in group if r.compile_ms is not None]),
        compile_score=mean_sol_score(compile_scores),
        best=ranked[0] if ranked else None,
    )


def _score_or_none(kernel_ms: float, baseline_ms: float, sol_ms: float) -> float | None:
    try:
        return sol_score(kernel_ms, baseline_ms, sol_ms)
    except ScoreError:
        return None


def _span(values: list[float]) -> tuple[float, float] | None:
    return (min(values), max(values)) if values else None
