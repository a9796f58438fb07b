"""SOLAR: a PyTorch reference -> FLOPs per unit and bytes -> speed-of-light time T_SOL."""

from solforge.solar.analysis import (
    DEFAULT_FP32_POLICY,
    FP32_POLICIES,
    Analysis,
    analyze_workload,
    sol_floor_ms,
)
from solforge.solar.tracer import OpTrace, trace_reference

__all__ = [
    "DEFAULT_FP32_POLICY",
    "FP32_POLICIES",
    "Analysis",
    "OpTrace",
    "analyze_workload",
    "sol_floor_ms",
    "trace_reference",
]
