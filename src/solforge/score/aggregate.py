"""Summaries of many scored kernels: a problem over its workloads, a tier over its problems.

Conventions, chosen so one failure cannot hide and one outlier cannot dominate:
- A workload whose output failed the check scores S = 0 (the formula's limit as T_k grows without
  bound) and has no speedup.
- Speedups are averaged geometrically (a 2x gain and a 2x loss cancel), over correct items only;
  medians are given too.
- fast_p (KernelBench, arXiv 2502.10517): the fraction of ALL items that are correct AND faster
  than the baseline by more than p; fast_0 is the fraction correct.
- A problem is correct only when every workload is; as an item of its tier its SOL score is the
  mean over its workloads and its speedup the geometric mean.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from solforge.score.sol import ScoreError, fraction_of_sol, sol_score, speedup

FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class Score:
    """One kernel against its bound and baselines: a workload, or a whole problem."""

    name: str
    correct: bool
    sol_score: float  # 0.0 when not correct
    speedup_eager: float | None  # None when not correct or the baseline was not timed
    speedup_compile: float | None
    fraction_of_sol: float | None  # T_SOL / T_k; None when not correct


@dataclass(frozen=True)
class Summary:
    name: str
    count: int
    correct: int
    sol_score_mean: float
    sol_score_median: float
    speedup_eager_geomean: float | None
    speedup_eager_median: float | None
    speedup_compile_geomean: float | None
    speedup_compile_median: float | None
    fraction_of_sol_median: float | None
    fast_p_eager: tuple[tuple[float, float], ...]  # (p, fraction of items)
    fast_p_compile: tuple[tuple[float, float], ...]

    def fast(self, p: float, baseline: str = "eager") -> float:
        table = dict(self.fast_p_eager if baseline == "eager" else self.fast_p_compile)
        if p not in table:
            raise ScoreError(f"fast_p for p={p} was not computed (have {sorted(table)})")
        return table[p]

    def as_score(self) -> Score:
        """This group as one item of a larger group (a problem within its tier)."""
        correct = self.correct == self.count
        return Score(self.name, correct, self.sol_score_mean,
                     self.speedup_eager_geomean if correct else None,
                     self.speedup_compile_geomean if correct else None,
                     self.fraction_of_sol_median if correct else None)


def score_workload(name: str, correct: bool, kernel_ms: float | None, sol_ms: float,
                   baseline_ms: float, eager_ms: float | None = None,
                   compile_ms: float | None = None) -> Score:
    """Score one workload. Raises FasterThanLight / BaselineAtBound as sol_score does."""
    if not correct or kernel_ms is None:
        return Score(name, False, 0.0, None, None, None)
    return Score(
        name=name,
        correct=True,
        sol_score=sol_score(kernel_ms, baseline_ms, sol_ms),
        speedup_eager=speedup(eager_ms, kernel_ms) if eager_ms is not None else None,
        speedup_compile=speedup(compile_ms, kernel_ms) if compile_ms is not None else None,
        fraction_of_sol=fraction_of_sol(kernel_ms, sol_ms),
    )


def summarize(name: str, scores: Sequence[Score],
              thresholds: Sequence[float] = FAST_P_THRESHOLDS) -> Summary:
    if not scores:
        raise ScoreError(f"{name}: nothing to summarize")
    sol = [s.sol_score for s in scores]
    eager = [s.speedup_eager for s in scores if s.correct and s.speedup_eager is not None]
    compiled = [s.speedup_compile for s in scores if s.correct and s.speedup_compile is not None]
    fractions = [s.fraction_of_sol for s in scores if s.correct and s.fraction_of_sol is not None]
    return Summary(
        name=name,
        count=len(scores),
        correct=sum(s.correct for s in scores),
        sol_score_mean=statistics.fmean(sol),
        sol_score_median=statistics.median(sol),
        speedup_eager_geomean=geometric_mean(eager),
        speedup_eager_median=_median(eager),
        speedup_compile_geomean=geometric_mean(compiled),
        speedup_compile_median=_median(compiled),
        fraction_of_sol_median=_median(fractions),
        fast_p_eager=tuple((p, fast_p(scores, p, "eager")) for p in thresholds),
        fast_p_compile=tuple((p, fast_p(scores, p, "compile")) for p in thresholds),
    )


def summarize_tier(tier: str, workloads_by_problem: Mapping[str, Sequence[Score]],
                   thresholds: Sequence[float] = FAST_P_THRESHOLDS) -> Summary:
    """A tier over its problems, each problem first summarized over its workloads."""
    problems = [summarize(problem, scores, thresholds).as_score()
                for problem, scores in workloads_by_problem.items()]
    return summarize(tier, problems, thresholds)


def fast_p(scores: Sequence[Score], p: float, baseline: str = "eager") -> float:
    """Fraction of all `scores` that are correct and more than `p` times faster than `baseline`
    ("eager" or "compile"). A correct item whose baseline was not timed does not count as fast."""
    if baseline not in ("eager", "compile"):
        raise ScoreError(f"baseline must be 'eager' or 'compile', got {baseline!r}")
    if not scores:
        raise ScoreError("fast_p of no scores")
    fast = 0
    for score in scores:
        gain = score.speedup_eager if baseline == "eager" else score.speedup_compile
        if score.correct and gain is not None and gain > p:
            fast += 1
    return fast / len(scores)


def geometric_mean(values: Sequence[float]) -> float | None:
    """exp(mean(log v)); None for no values."""
    if not values:
        return None
    if min(values) <= 0:
        raise ScoreError(f"geometric mean needs positive values, got {min(values)}")
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
