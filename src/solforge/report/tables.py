"""The numbers the report's tables and charts share: per-workload SOL scores, the best candidate
of each workload, and solutions ranked as solforge.score.rank ranks them (bench and the
optimizer rank the same way, so they name the same best solution).

- T_b is the faster of the two reference baselines (eager, torch.compile): bench's default;
  torch.compile's own score takes T_b = eager.
- CPU timings (`--device cpu`) get speedups, CPU against CPU, but never a SOL score.
- Beside S, the reach T_reach / T_k with T_reach = max(T_SOL, launch floor): no single kernel
  ends sooner than a near-empty one, so a workload whose T_SOL is under that floor is
  launch-bound and its reach, not its fraction of T_SOL, says how much is left. S is unchanged.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
    median_reach: float | None = None  # max(T_SOL, floor) / T_k; None without a floor

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


def launch_floor_ms(path: Path) -> float:
    """The launch floor in a file of benchmarks/launch_floor.py: the fastest cold-L2 median
    kernel-only time of a near-empty kernel, in ms."""
    try:
        return float(json.loads(Path(path).read_text())["floor_us"]) / 1000
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: no launch floor (floor_us) readable: {exc}") from exc


def reach(t_k_ms: float, t_sol_ms: float, floor_ms: float) -> float:
    """max(T_SOL, floor) / T_k: the kernel's time against the best a single kernel can do."""
    return max(t_sol_ms, floor_ms) / t_k_ms


def launch_bound(t_sol_ms: float, floor_ms: float) -> bool:
    """A workload whose speed of light is faster than an empty kernel."""
    return t_sol_ms < floor_ms


def candidate_reach(result: MeasuredWorkload, candidate: SolutionRun,
                    floor_ms: float | None) -> float | None:
    """reach() of a candidate that passed on a GPU; None on the CPU or without a floor."""
    if (floor_ms is None or result.cpu_timing or result.sol is None
            or candidate.status != PASSED or not candidate.latency_ms):
        return None
    return reach(candidate.latency_ms, result.sol.t_sol_ms, floor_ms)


def standings(results: Sequence[MeasuredWorkload],
              floor_ms: float | None = None) -> list[Standing]:
    """Every solution of every problem, per platform, over its workloads; best first, as
    solforge.score.rank ranks. With a launch floor, each row also has its median reach."""
    entries: dict[tuple[str, str, str], list[tuple[MeasuredWorkload, SolutionRun]]] = {}
    for result in results:
        for candidate in result.candidates:
            key = (result.problem, candidate.solution, result.platform)
            entries.setdefault(key, []).append((result, candidate))
    rows = [_standing(pairs, floor_ms) for _, pairs in sorted(entries.items())]
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


def _standing(pairs: list[tuple[MeasuredWorkload, SolutionRun]],
              floor_ms: float | None = None) -> Standing:
    first_result, first = pairs[0]
    scores = [s for s in (candidate_score(r, c) for r, c in pairs) if s is not None]
    speedups = [s for s in (candidate_speedup(r, c) for r, c in pairs) if s is not None]
    reaches = [x for x in (candidate_reach(r, c, floor_ms) for r, c in pairs) if x is not None]
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
        median_reach=statistics.median(reaches) if reaches else None,
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
