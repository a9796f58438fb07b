"""How close a kernel is to the speed of light, and how much faster than a baseline.

The SOL score (SOL-ExecBench, arXiv 2603.19173) places a kernel's time T_k on the line from a
baseline T_b to the speed-of-light time T_SOL:

    S = (T_b - T_SOL) / ((T_k - T_SOL) + (T_b - T_SOL))

S = 0.5 when the kernel only matches the baseline, 1.0 at T_SOL, and falls toward 0 as T_k grows.
Nothing is clamped. A T_k under T_SOL would give S > 1, which can only mean a cheat or a broken
bound, so it raises FasterThanLight for the caller to record as REWARD_HACK. A baseline at or
under T_SOL leaves no interval to score in (and says the bound itself is suspect): it raises
BaselineAtBound rather than return a number that would hide that in an average.
"""

from __future__ import annotations

import math

from solforge.errors import SolforgeError


class ScoreError(SolforgeError):
    """Times that cannot be scored."""


class FasterThanLight(ScoreError):
    """A kernel time under the speed-of-light time: physically impossible, so a cheat or a bug."""

    def __init__(self, kernel_ms: float, sol_ms: float) -> None:
        self.kernel_ms = kernel_ms
        self.sol_ms = sol_ms
        super().__init__(f"kernel time {kernel_ms:.6g} ms is under the speed-of-light time "
                         f"{sol_ms:.6g} ms")


class BaselineAtBound(ScoreError):
    """A baseline at or under T_SOL: no score is defined, and the bound should be checked."""

    def __init__(self, baseline_ms: float, sol_ms: float) -> None:
        self.baseline_ms = baseline_ms
        self.sol_ms = sol_ms
        super().__init__(f"baseline time {baseline_ms:.6g} ms is not above the speed-of-light "
                         f"time {sol_ms:.6g} ms: the SOL score is undefined (check the bound)")


def sol_score(kernel_ms: float, baseline_ms: float, sol_ms: float) -> float:
    """The SOL-ExecBench score, in (0, 1]."""
    _check_scorable(kernel_ms, baseline_ms, sol_ms)
    headroom = baseline_ms - sol_ms
    return headroom / ((kernel_ms - sol_ms) + headroom)


def log_sol_score(kernel_ms: float, baseline_ms: float, sol_ms: float) -> float:
    """The log-scale form: S = 0.5 * (1 + log(T_b / T_k) / log(T_b / T_SOL)).

    0.5 at the baseline and 1.0 at T_SOL like the linear form, but each halving of the time counts
    the same; it is negative for kernels slower than T_b^2 / T_SOL (not clamped).
    """
    _check_scorable(kernel_ms, baseline_ms, sol_ms)
    return 0.5 * (1 + math.log(baseline_ms / kernel_ms) / math.log(baseline_ms / sol_ms))


def speedup(baseline_ms: float, kernel_ms: float) -> float:
    """How many times faster the kernel is than the baseline (eager, torch.compile, ...)."""
    _check_positive(baseline_ms=baseline_ms, kernel_ms=kernel_ms)
    return baseline_ms / kernel_ms


def fraction_of_sol(kernel_ms: float, sol_ms: float) -> float:
    """T_SOL / T_k: 1.0 at the speed of light. Raises FasterThanLight above 1."""
    _check_positive(kernel_ms=kernel_ms, sol_ms=sol_ms)
    if kernel_ms < sol_ms:
        raise FasterThanLight(kernel_ms, sol_ms)
    return sol_ms / kernel_ms


def _check_scorable(kernel_ms: float, baseline_ms: float, sol_ms: float) -> None:
    """The baseline is checked first: with a broken bound, a kernel under it proves nothing."""
    _check_positive(kernel_ms=kernel_ms, baseline_ms=baseline_ms, sol_ms=sol_ms)
    if baseline_ms <= sol_ms:
        raise BaselineAtBound(baseline_ms, sol_ms)
    if kernel_ms < sol_ms:
        raise FasterThanLight(kernel_ms, sol_ms)


def _check_positive(**times_ms: float) -> None:
    for name, value in times_ms.items():
        if not (math.isfinite(value) and value > 0):
            raise ScoreError(f"{name} must be a positive, finite time in ms, got {value}")
