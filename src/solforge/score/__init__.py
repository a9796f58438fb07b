"""Scores: the SOL score, speedups over eager and torch.compile, and their aggregates."""

from solforge.score.aggregate import (
    FAST_P_THRESHOLDS,
    Score,
    Summary,
    fast_p,
    geometric_mean,
    score_workload,
    summarize,
    summarize_tier,
)
from solforge.score.sol import (
    BaselineAtBound,
    FasterThanLight,
    ScoreError,
    fraction_of_sol,
    log_sol_score,
    sol_score,
    speedup,
)

__all__ = [
    "FAST_P_THRESHOLDS",
    "BaselineAtBound",
    "FasterThanLight",
    "Score",
    "ScoreError",
    "Summary",
    "fast_p",
    "fraction_of_sol",
    "geometric_mean",
    "log_sol_score",
    "score_workload",
    "sol_score",
    "speedup",
    "summarize",
    "summarize_tier",
]
