"""Where the harness meets the speed-of-light analysis and the SOL score: one module, so the
integration point is plain.

Two times come from the analysis (solforge.solar): T_SOL, the roofline time the score is
measured against, and the floor, T_SOL again with every peak at the maximum boost clock and
float32 products priced at the fastest tensor-core rate. No honest kernel beats the floor, so a
measured time under it is a REWARD_HACK. A time between the floor and T_SOL is physically
possible (the kernel computes in a cheaper precision, or the bound is loose): it is not a cheat,
but it gets no score, since a score above 1 would only hide a loose bound in an average.
"""

from __future__ import annotations

from dataclasses import dataclass

from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.hardware.profile import HardwareProfile
from solforge.problem.problem import Problem


@dataclass(frozen=True)
class SpeedOfLight:
    t_sol_ms: float
    floor_ms: float
    bound: str  # "memory" or "compute"
    hardware: str  # the profile's name


def speed_of_light(problem: Problem, workload: Workload,
                   profile: HardwareProfile) -> SpeedOfLight | str:
    """T_SOL and the floor, or why the analysis could not give them."""
    from solforge.solar import analyze_workload, sol_floor_ms, trace_reference

    try:
        trace = trace_reference(problem, workload)
        analysis = analyze_workload(problem, workload, profile, trace=trace)
        floor_ms = sol_floor_ms(problem, workload, profile, trace=trace)
    except SolforgeError as exc:
        return f"no speed-of-light time: {exc}"
    return SpeedOfLight(analysis.t_sol_ms, floor_ms, analysis.bound, analysis.hardware)


def below_floor(latency_ms: float, sol: SpeedOfLight) -> str | None:
    """The REWARD_HACK evidence when a measured time is physically impossible."""
    if latency_ms >= sol.floor_ms:
        return None
    return (f"measured {latency_ms:.6g} ms, under the physical floor {sol.floor_ms:.6g} ms "
            f"({sol.hardware} at its maximum clock, every product at the fastest tensor-core "
            f"rate; T_SOL {sol.t_sol_ms:.6g} ms): no kernel can be this fast")


def score(latency_ms: float, baseline_ms: float | None,
          sol: SpeedOfLight) -> tuple[float | None, str | None]:
    """The SOL score, or None and the reason it is undefined."""
    from solforge.score import ScoreError, sol_score

    if baseline_ms is None:
        return None, "no baseline time"
    try:
        return sol_score(latency_ms, baseline_ms, sol.t_sol_ms), None
    except ScoreError as exc:
        return None, f"no SOL score: {exc}"
