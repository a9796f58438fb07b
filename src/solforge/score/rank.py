"""How solutions are compared on one problem: the one convention that bench, report, forge and
eval share, so that they name the same best solution from the same measurements.

- T_b of a workload is the configured baseline; "best", the default on a GPU, is the faster of
  eager PyTorch and torch.compile.
- A solution's S on a problem is the MEAN of its per-workload S over the workloads that can be
  scored: a workload it failed scores 0 (the formula's limit as T_k grows without bound); one
  whose S is undefined (a time under T_SOL, a baseline at the bound) is left out, never clamped.
  The mean, not the median, so that failing one workload in three always costs a third.
- Its speedup is the geometric mean of T_b / T_k over the workloads it passed (a 2x gain and a
  2x loss cancel).
- Ranking, best first: a solution with an S before one without (CPU timings have none), then the
  higher S, then more workloads passed, then the higher speedup.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from solforge.data.trace import Status, Trace
from solforge.score.aggregate import geometric_mean

T = TypeVar("T")


@dataclass(frozen=True)
class Rating:
    """One solution on one problem, under the convention above."""

    sol_score: float | None  # mean S over the scored workloads; None when none could be scored
    passed: int  # workloads it passed
    speedup: float | None  # geometric mean of T_b / T_k over the passed workloads

    def key(self) -> tuple[bool, float, int, float]:
        """Sorts ascending from worst to best."""
        return (self.sol_score is not None, self.sol_score or 0.0, self.passed,
                self.speedup or 0.0)


def mean_sol_score(workload_scores: Sequence[float]) -> float | None:
    """A solution's S on a problem: the mean of its per-workload S (a failure counted as 0)."""
    return statistics.fmean(workload_scores) if workload_scores else None


def rate(workload_scores: Sequence[float], passed: int, speedups: Sequence[float]) -> Rating:
    """`workload_scores`: S per scored workload, 0 for a failed one; `speedups`: T_b / T_k per
    passed workload."""
    return Rating(mean_sol_score(workload_scores), passed, geometric_mean(list(speedups)))


def best(items: Iterable[T], rating: Callable[[T], Rating]) -> T | None:
    """The best-rated item (the first of equals), or None for none."""
    ranked = ranked_best_first(items, rating)
    return ranked[0] if ranked else None


def ranked_best_first(items: Iterable[T], rating: Callable[[T], Rating]) -> list[T]:
    """`items` from best to worst; equals keep their order."""
    return sorted(items, key=lambda item: rating(item).key(), reverse=True)


def rate_traces(traces: Sequence[Trace]) -> Rating:
    """One solution's evaluation of a problem's workloads (`solforge eval`, the optimizer): a
    failed workload scores 0 when the run is scored at all (some workload has an S)."""
    passed = [t for t in traces if t.status is Status.PASSED]
    scored = any(t.evaluation.sol_score is not None for t in traces)
    scores = [0.0 if t.status is not Status.PASSED else t.evaluation.sol_score for t in traces
              if scored and (t.status is not Status.PASSED or t.evaluation.sol_score is not None)]
    speedups = [t.evaluation.performance.speedup_factor for t in passed
                if t.evaluation.performance and t.evaluation.performance.speedup_factor > 0]
    return rate(scores, len(passed), speedups)
