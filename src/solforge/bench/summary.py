"""What `solforge bench` prints at the end: one line per problem, one per tier.

Scores are recomputed from the stored times with solforge.score (T_SOL on the run's hardware
profile, the reference times, each solution's time), so the tables follow the flags of the run
that prints them, also for traces an earlier run measured:
- T_b of a workload is the configured baseline: eager, torch.compile, or the faster of the two;
- the S of torch.compile is scored against eager PyTorch: how far the compiler moves toward the
  speed of light;
- a problem's best solution is chosen by solforge.score.rank, the convention the report and the
  optimizer use too: the highest mean S over its workloads (a failed workload scores 0), then
  the most workloads passed, then the highest geometric-mean speedup over T_b (on the CPU, where
  nothing is scored, the last two decide);
- a tier's medians are over its problems (`summarize_tier`), the solutions' side taking each
  problem's best solution. Speedups are geometric means over the passing workloads.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from solforge.bench.results import Measured, ProblemResults
from solforge.harness.baseline import choose
from solforge.harness.protocol import REFERENCE_COMPILE, REFERENCE_EAGER
from solforge.score import (
    Score,
    ScoreError,
    geometric_mean,
    score_workload,
    speedup,
    summarize_tier,
)
from solforge.score.rank import Rating, best, mean_sol_score

EAGER, COMPILE = REFERENCE_EAGER, REFERENCE_COMPILE
TORCH_COMPILE = "torch.compile"


@dataclass(frozen=True)
class SolutionLine:
    """One solution on one problem, over the benched workloads."""

    name: str
    passed: int
    count: int  # the benched workloads; one with no trace (a unit that could not run) failed
    sol_score: float | None  # the mean S over the scored workloads; None on the CPU
    speedup_eager: float | None
    speedup_compile: float | None
    scores: tuple[Score, ...]  # per scored workload (empty on the CPU)
    speedup_baseline: float | None = None  # over T_b, the configured baseline

    def rating(self) -> Rating:
        return Rating(self.sol_score, self.passed, self.speedup_baseline)


def baseline_ms(results: ProblemResults, uuid: str, baseline: str) -> float | None:
    """T_b: the configured baseline's time on this workload, if it was measured."""
    times = {EAGER: results.reference_ms(EAGER, uuid),
             COMPILE: results.reference_ms(COMPILE, uuid)}
    report = choose(baseline, times, cached=False)
    return report.latency_ms if report else None


def solution_line(results: ProblemResults, name: str, outcomes: dict[str, Measured],
                  baseline: str, scored: bool) -> SolutionLine:
    scores = []
    gains: dict[str, list[float]] = {EAGER: [], COMPILE: [], "T_b": []}
    for uuid, measured in outcomes.items():
        eager, compiled = results.reference_ms(EAGER, uuid), results.reference_ms(COMPILE, uuid)
        t_b = baseline_ms(results, uuid, baseline)
        for kind, reference in ((EAGER, eager), (COMPILE, compiled), ("T_b", t_b)):
            if measured.passed and reference is not None:
                gains[kind].append(speedup(reference, measured.latency_ms))
        score = (workload_score(name, measured, results.t_sol_ms.get(uuid), t_b, eager, compiled)
                 if scored else None)
        if score is not None:
            scores.append(score)
    return SolutionLine(name, sum(m.passed for m in outcomes.values()), len(results.workloads),
                        mean_sol_score([score.sol_score for score in scores]),
                        geometric_mean(gains[EAGER]), geometric_mean(gains[COMPILE]),
                        tuple(scores), geometric_mean(gains["T_b"]))


def workload_score(name: str, measured: Measured, t_sol_ms: float | None,
                   t_b_ms: float | None, eager_ms: float | None,
                   compile_ms: float | None) -> Score | None:
    """None when the workload cannot be scored: no T_SOL, no T_b, or times the SOL score
    rejects (a baseline at the bound, a time under it)."""
    if t_sol_ms is None or t_b_ms is None:
        return None
    try:
        return score_workload(name, measured.passed, measured.latency_ms, t_sol_ms, t_b_ms,
                              eager_ms, compile_ms)
    except ScoreError:
        return None


def compile_line(results: ProblemResults, scored: bool) -> SolutionLine | None:
    """torch.compile as a solution scored against eager."""
    outcomes = results.references.get(COMPILE)
    if not outcomes:
        return None
    return solution_line(results, TORCH_COMPILE, outcomes, EAGER, scored)


def best_solution(results: ProblemResults, baseline: str, scored: bool) -> SolutionLine | None:
    lines = [solution_line(results, name, outcomes, baseline, scored)
             for name, outcomes in results.solutions.items()]
    return best(lines, SolutionLine.rating)


@dataclass(frozen=True)
class ProblemLine:
    address: str
    tier: str | None
    t_sol_ms: tuple[float, ...]  # per analysed workload
    eager_ms: tuple[float, ...]  # per workload the reference passed
    compile_ms: tuple[float, ...]
    best: SolutionLine | None


def problem_line(results: ProblemResults, baseline: str, scored: bool) -> ProblemLine:
    return ProblemLine(results.address, results.tier, tuple(results.t_sol_ms.values()),
                       _passing_times(results, EAGER), _passing_times(results, COMPILE),
                       best_solution(results, baseline, scored))


@dataclass(frozen=True)
class TierLine:
    tier: str
    problems: int
    with_solutions: int
    all_passed: int
    compile_sol_score: float | None  # median over problems of torch.compile's mean S
    sol_score: float | None  # median over problems of the best solution's mean S
    fraction_of_sol: float | None  # median over problems of T_SOL / T_k
    speedup_eager: float | None  # median over problems of the best solution's speedup


def tier_line(tier: str, problems: Sequence[ProblemResults], baseline: str,
              scored: bool) -> TierLine:
    compile_scores: dict[str, Sequence[Score]] = {}
    best_scores: dict[str, Sequence[Score]] = {}
    best_lines: list[SolutionLine] = []
    for results in problems:
        compiled = compile_line(results, scored)
        if compiled is not None and compiled.scores:
            compile_scores[results.address] = compiled.scores
        best = best_solution(results, baseline, scored)
        if best is None:
            continue
        best_lines.append(best)
        if best.scores:
            best_scores[results.address] = best.scores
    compiled_tier = summarize_tier(tier, compile_scores) if compile_scores else None
    solutions_tier = summarize_tier(tier, best_scores) if best_scores else None
    gains = [line.speedup_eager for line in best_lines if line.speedup_eager is not None]
    return TierLine(
        tier, len(problems), len(best_lines),
        sum(line.passed == line.count for line in best_lines),
        compiled_tier.sol_score_median if compiled_tier else None,
        solutions_tier.sol_score_median if solutions_tier else None,
        solutions_tier.fraction_of_sol_median if solutions_tier else None,
        statistics.median(gains) if gains else None)


def tier_lines(problems: Sequence[ProblemResults], baseline: str,
               scored: bool) -> list[TierLine]:
    """One line per tier, in the order the tiers first appear."""
    by_tier: dict[str, list[ProblemResults]] = {}
    for results in problems:
        by_tier.setdefault(results.tier or "-", []).append(results)
    return [tier_line(tier, members, baseline, scored) for tier, members in by_tier.items()]


def footnote(scored: bool, baseline: str, profile: str) -> str:
    if not scored:
        return ("CPU mode: the times are CPU wall times and T_SOL is the GPU's bound, shown for "
                "scale. Triton solutions run in Triton's interpreter (Python), so `x eager` "
                "compares that interpreter with eager PyTorch on the CPU: it checks that the "
                "pipeline works and says nothing about kernel speed. No SOL score, no ranking; "
                "run on a GPU for those. Speedups are geometric means over the passing "
                "workloads.")
    chosen = {EAGER: "eager PyTorch", COMPILE: "torch.compile",
              "best": "the faster of eager and torch.compile"}[baseline]
    return (f"S: SOL score against T_b = {chosen}, T_SOL on {profile}, mean over workloads "
            f"(a failed workload scores 0); torch.compile's S is against eager. Speedups are "
            f"geometric means over the passing workloads.")


def _passing_times(results: ProblemResults, kind: str) -> tuple[float, ...]:
    return tuple(m.latency_ms for m in results.references.get(kind, {}).values() if m.passed)
