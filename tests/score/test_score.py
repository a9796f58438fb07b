"""SOL score, speedups and aggregates, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from solforge.score import (
    BaselineAtBound,
    FasterThanLight,
    ScoreError,
    fast_p,
    fraction_of_sol,
    geometric_mean,
    log_sol_score,
    score_workload,
    sol_score,
    speedup,
    summarize,
    summarize_tier,
)


@pytest.mark.parametrize(("kernel", "baseline", "sol", "expected"), [
    (2.0, 2.0, 1.0, 0.5),  # matches the baseline
    (1.0, 2.0, 1.0, 1.0),  # at the speed of light
    (3.0, 2.0, 1.0, 1 / 3),  # 1 / (2 + 1)
    (1.5, 3.0, 1.0, 0.8),  # 2 / (0.5 + 2)
])
def test_sol_score_hand_values(kernel, baseline, sol, expected):
    assert sol_score(kernel, baseline, sol) == pytest.approx(expected)


@pytest.mark.parametrize(("kernel", "expected"), [
    (4.0, 0.5),  # the baseline
    (1.0, 1.0),  # the bound
    (2.0, 0.75),  # 0.5 * (1 + ln 2 / ln 4)
    (8.0, 0.25),  # 0.5 * (1 - ln 2 / ln 4)
    (32.0, -0.25),  # slower than T_b^2 / T_SOL: negative, not clamped
])
def test_log_sol_score_hand_values(kernel, expected):
    assert log_sol_score(kernel, 4.0, 1.0) == pytest.approx(expected)


@pytest.mark.parametrize("score", [sol_score, log_sol_score])
def test_kernel_under_the_bound_is_an_error(score):
    with pytest.raises(FasterThanLight) as raised:
        score(0.9, 2.0, 1.0)
    assert raised.value.kernel_ms == 0.9
    assert raised.value.sol_ms == 1.0


@pytest.mark.parametrize("baseline", [1.0, 0.5])
def test_baseline_at_or_under_the_bound_has_no_score(baseline):
    with pytest.raises(BaselineAtBound, match="undefined"):
        sol_score(2.0, baseline, 1.0)
    with pytest.raises(BaselineAtBound):
        sol_score(0.5, baseline, 1.0)  # the bound is in question, so no cheat verdict either


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_times_must_be_positive_and_finite(bad):
    with pytest.raises(ScoreError, match="positive"):
        sol_score(bad, 2.0, 1.0)
    with pytest.raises(ScoreError, match="positive"):
        speedup(2.0, bad)


def test_speedup_and_fraction_of_sol():
    assert speedup(3.0, 1.5) == 2.0
    assert fraction_of_sol(4.0, 1.0) == 0.25
    with pytest.raises(FasterThanLight):
        fraction_of_sol(0.5, 1.0)


def _workloads():
    return [
        # S = 3 / (1 + 3); eager 8 / 2; compile 4 / 2; T_SOL / T_k = 1 / 2
        score_workload("w1", True, 2.0, 1.0, 4.0, eager_ms=8.0, compile_ms=4.0),
        # S = 0.5; eager 1; compile 0.5; fraction 1 / 4
        score_workload("w2", True, 4.0, 1.0, 4.0, eager_ms=4.0, compile_ms=2.0),
        # S = 1; eager 16; compile 8; fraction 1
        score_workload("w3", True, 1.0, 1.0, 4.0, eager_ms=16.0, compile_ms=8.0),
        score_workload("w4", False, None, 1.0, 4.0, eager_ms=4.0, compile_ms=4.0),
    ]


def test_failed_workload_scores_zero_without_speedups():
    failed = _workloads()[3]
    assert (failed.correct, failed.sol_score) == (False, 0.0)
    assert failed.speedup_eager is None and failed.fraction_of_sol is None


def test_summary_of_a_problem():
    summary = summarize("problem", _workloads())
    assert (summary.count, summary.correct) == (4, 3)
    assert summary.sol_score_mean == pytest.approx((0.75 + 0.5 + 1.0 + 0.0) / 4)
    assert summary.sol_score_median == pytest.approx((0.5 + 0.75) / 2)
    assert summary.speedup_eager_geomean == pytest.approx(4.0)  # (4 * 1 * 16) ** (1/3)
    assert summary.speedup_eager_median == pytest.approx(4.0)
    assert summary.speedup_compile_geomean == pytest.approx(2.0)  # (2 * 0.5 * 8) ** (1/3)
    assert summary.fraction_of_sol_median == pytest.approx(0.5)
    assert summary.fast_p_eager == ((0.0, 0.75), (1.0, 0.5), (1.5, 0.5), (2.0, 0.5))
    assert summary.fast_p_compile == ((0.0, 0.75), (1.0, 0.5), (1.5, 0.5), (2.0, 0.25))
    assert summary.fast(2.0, "compile") == 0.25
    with pytest.raises(ScoreError, match="not computed"):
        summary.fast(3.0)


def test_summary_of_a_tier_counts_a_problem_correct_only_if_every_workload_is():
    w1, w2, w3, w4 = _workloads()
    tier = summarize_tier("L1", {"a": [w1, w2, w3], "b": [w4, w1]})
    assert (tier.count, tier.correct) == (2, 1)
    assert tier.sol_score_mean == pytest.approx((0.75 + 0.375) / 2)
    assert tier.speedup_eager_geomean == pytest.approx(4.0)  # only problem a is correct
    assert tier.fast(0.0) == 0.5
    assert tier.fast(1.0) == 0.5


def test_fast_p_and_geometric_mean_edges():
    assert geometric_mean([]) is None
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ScoreError):
        geometric_mean([1.0, 0.0])
    with pytest.raises(ScoreError, match="baseline"):
        fast_p(_workloads(), 1.0, "cublas")
    with pytest.raises(ScoreError):
        summarize("empty", [])
