"""The report's figures, drawn with matplotlib and embedded as inline SVG, so the page loads
nothing from anywhere.

- The SOL-score distribution: per tier, S of the best candidate of each workload beside S of
  torch.compile against eager, on the 0 to 1 scale (0.5 is the baseline, 1 the speed of light).
- The roofline of one hardware profile: arithmetic intensity (the analysis' FLOPs per fused DRAM
  byte) against achieved FLOP/s (the same FLOPs over the measured time), under the profile's DRAM
  bandwidth slope and the compute ceilings of the units the workloads need.
- Per platform (a GPU, or the CPU), whatever the store holds for each workload: its measured
  times beside its T_SOL, and each passing candidate's speedup over eager. These need no score,
  so a store filled on a CPU machine gets charts too.

Every plotted series carries an SVG group id (`gid`): `scores-best-<tier>`,
`scores-compile-<tier>`, `roofline-eager`, `roofline-compile`, `roofline-solution-<i>`,
`ceiling-<unit>`, `times-tsol`, `times-eager`, `times-compile`, `times-solution-<i>`,
`speedup-solution-<i>`, so readers and tests can find what was drawn.
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from solforge.hardware import HardwareProfile
from solforge.hardware.units import TENSOR_BF16, rate_label
from solforge.report.data import PASSED, MeasuredWorkload, ReportError, WorkloadAnalysis
from solforge.report.tables import best_score, compile_score, tier_rank

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

EAGER_COLOR = "#7f7f7f"
COMPILE_COLOR = "#1f77b4"
# One color per solution on the roofline; solutions past these share the last one.
SOLUTION_COLORS = ("#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
                   "#17becf")
# The SVG's date, creator and format entries would only make two renderings of one store differ.
_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


def render_svg(figure: Figure, salt: str) -> str:
    """The figure as one `<svg>` element (no XML prolog). `salt` seeds the SVG's internal ids,
    so two charts on one page never share an id."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg", metadata=_NO_METADATA)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def score_strip(results: Sequence[MeasuredWorkload]) -> str | None:
    """S per tier as a strip plot; None when no workload has a score."""
    best, compiled = _scores_by_tier(results)
    tiers = sorted(set(best) | set(compiled), key=lambda t: (tier_rank(t), t))
    if not tiers:
        return None
    figure = _figure(width=max(5.0, 1.6 * len(tiers) + 2.5), height=4.2)
    axes = figure.add_subplot()
    jitter = np.random.default_rng(0)  # spreads the points sideways; fixed, so pages reproduce
    series = (("best", "best candidate", -0.2, SOLUTION_COLORS[0], best),
              ("compile", "torch.compile vs eager", 0.2, COMPILE_COLOR, compiled))
    for index, tier in enumerate(tiers):
        for key, label, offset, color, values_by_tier in series:
            values = values_by_tier.get(tier, [])
            x = index + offset + jitter.uniform(-0.08, 0.08, len(values))
            axes.scatter(x, values, s=16, color=color, alpha=0.75, gid=f"scores-{key}-{tier}",
                         label=label if index == 0 else None)
            if values:
                median = statistics.median(values)
                axes.hlines(median, index + offset - 0.14, index + offset + 0.14, color=color,
                            linewidth=2)
    axes.axhline(0.5, color="black", linewidth=0.8, linestyle="--")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.text(-0.45, 0.51, "baseline T_b", ha="left", va="bottom", fontsize=8)
    axes.text(-0.45, 1.01, "speed of light", ha="left", va="bottom", fontsize=8)
    axes.set_xticks(range(len(tiers)),
                    [f"{t}\n(n = {len(best.get(t, []))})" for t in tiers])
    axes.set_xlim(-0.5, len(tiers) - 0.5)
    axes.set_ylim(0.0, 1.08)
    axes.set_ylabel("SOL score S (bar: median)")
    axes.set_xlabel("tier (n: workloads with a scored candidate)")
    axes.legend(loc="lower left", fontsize=8)
    return render_svg(figure, salt="scores")


def _scores_by_tier(results: Sequence[MeasuredWorkload]
                    ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per tier: S of each workload's best candidate, and S of torch.compile against eager."""
    best: dict[str, list[float]] = {}
    compiled: dict[str, list[float]] = {}
    for result in results:
        tier = result.tier or "other"
        found = best_score(result)
        if found is not None:
            best.setdefault(tier, []).append(found[1])
        score = compile_score(result)
        if score is not None:
            compiled.setdefault(tier, []).append(score)
    return best, compiled


def roofline(results: Sequence[MeasuredWorkload], hardware: str,
             profile: HardwareProfile | None) -> str | None:
    """The roofline of the GPU results priced on `hardware`; ceilings only when its `profile`
    is known. None when no workload has FLOPs to place on the log axes."""
    points = [r for r in results if _on_roofline(r, hardware)]
    if not points:
        return None
    figure = _figure(width=7.5, height=5.0)
    axes = figure.add_subplot()
    intensities = [r.sol.intensity for r in points]
    if profile is not None:
        _draw_ceilings(axes, profile, {ceiling_unit(r.sol, profile) for r in points},
                       intensities)
    _plot_series(axes, "roofline-eager", "eager", "o", EAGER_COLOR,
                 [(r.sol, r.eager_ms) for r in points])
    _plot_series(axes, "roofline-compile", "torch.compile", "s", COMPILE_COLOR,
                 [(r.sol, r.compile_ms) for r in points])
    for index, (name, pairs) in enumerate(_solution_series(points)):
        color = SOLUTION_COLORS[min(index, len(SOLUTION_COLORS) - 1)]
        _plot_series(axes, f"roofline-solution-{index}", name, "^", color, pairs)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOPs per fused DRAM byte)")
    axes.set_ylabel("achieved FLOP/s (all FLOPs / measured time)")
    axes.set_title(hardware, fontsize=10)
    axes.grid(True, which="major", linewidth=0.3)
    axes.legend(loc="lower right", fontsize=8)
    return render_svg(figure, salt=f"roofline-{hardware}")


def ceiling_unit(sol: WorkloadAnalysis, profile: HardwareProfile) -> str:
    """The compute ceiling a workload sits under: the unit whose FLOPs take longest at its peak
    (for a compute-bound workload, the unit that binds); tensor-core bf16 when it has none."""
    seconds = {unit: flops / profile.peak(unit) for unit, flops in sol.flops_by_unit.items()
               if flops > 0 and profile.has(unit)}
    if seconds:
        return max(seconds, key=seconds.__getitem__)
    return TENSOR_BF16 if profile.has(TENSOR_BF16) else max(profile.peaks,
                                                            key=profile.peaks.__getitem__)


def _on_roofline(result: MeasuredWorkload, hardware: str) -> bool:
    """GPU timings of a workload with FLOPs and traffic (a log axis has no place for zero)."""
    sol = result.sol
    return (not result.cpu_timing and sol is not None and sol.hardware == hardware
            and sol.flops > 0 and sol.intensity is not None)


def _solution_series(points: Sequence[MeasuredWorkload]
                     ) -> list[tuple[str, list[tuple[WorkloadAnalysis, float | None]]]]:
    """The passing candidates' points, one series per solution (most points first); solutions
    past the palette are merged into one "other solutions" series."""
    by_name: dict[str, list[tuple[WorkloadAnalysis, float | None]]] = {}
    for result in points:
        for candidate in result.candidates:
            if candidate.status == PASSED:
                by_name.setdefault(candidate.solution, []).append((result.sol,
                                                                    candidate.latency_ms))
    ordered = sorted(by_name.items(), key=lambda item: (-len(item[1]), item[0]))
    shown = len(SOLUTION_COLORS) - 1
    if len(ordered) <= len(SOLUTION_COLORS):
        return ordered
    merged = [pair for _, pairs in ordered[shown:] for pair in pairs]
    return [*ordered[:shown], ("other solutions", merged)]


def _plot_series(axes: Axes, gid: str, label: str, marker: str, color: str,
                 pairs: list[tuple[WorkloadAnalysis, float | None]]) -> None:
    """One point per timed workload: x = FLOPs / fused bytes, y = FLOPs / time."""
    timed = [(sol, ms) for sol, ms in pairs if ms is not None]
    if not timed:
        return
    x = [sol.intensity for sol, _ in timed]
    y = [sol.flops / (ms * 1e-3) for sol, ms in timed]
    axes.plot(x, y, linestyle="none", marker=marker, markersize=5, color=color, alpha=0.8,
              label=f"{label} ({len(timed)})", gid=gid)


def _draw_ceilings(axes: Axes, profile: HardwareProfile, units: set[str],
                   intensities: list[float]) -> None:
    """The DRAM slope (bandwidth x intensity) up to the highest ridge point (peak / bandwidth),
    and a flat ceiling from each unit's ridge point on, a decade past the plotted points."""
    bandwidth = profile.dram_bytes_per_s
    ridges = {unit: profile.peak(unit) / bandwidth for unit in units}
    low = min(*intensities, *ridges.values()) / 10
    high = max(*intensities, *ridges.values()) * 10
    slope = np.geomspace(low, max(ridges.values()), 50)
    axes.plot(slope, bandwidth * slope, color="black", linewidth=1.0, gid="ceiling-dram",
              label=f"DRAM {bandwidth / 1e12:.3g} TB/s")
    for unit, ridge in ridges.items():
        peak = profile.peak(unit)
        axes.plot([ridge, high], [peak, peak], color="black", linewidth=1.0,
                  gid=f"ceiling-{unit}")
        axes.text(high, peak * 1.1, f"{unit} {peak / 1e12:.3g} T{rate_label(unit)}",
                  ha="right", va="bottom", fontsize=8)


MAX_WORKLOAD_ROWS = 60  # rows of one per-workload chart; past this it stays readable no more


def workload_times(results: Sequence[MeasuredWorkload], platform: str) -> str | None:
    """One row per workload measured on `platform`: T_SOL, eager, torch.compile and each
    passing candidate's time on one log axis. None when nothing on it was timed."""
    rows = _workload_rows(results, platform)
    if not rows:
        return None
    figure, axes = _row_figure(rows)
    y = list(range(len(rows)))
    _plot_row_series(axes, "times-tsol", "T_SOL", "|", "black",
                     [(i, r.sol.t_sol_ms if r.sol else None) for i, r in zip(y, rows)])
    _plot_row_series(axes, "times-eager", "eager", "o", EAGER_COLOR,
                     [(i, r.eager_ms) for i, r in zip(y, rows)])
    _plot_row_series(axes, "times-compile", "torch.compile", "s", COMPILE_COLOR,
                     [(i, r.compile_ms) for i, r in zip(y, rows)])
    for index, (name, pairs) in enumerate(_candidate_rows(rows, lambda r, c: c.latency_ms)):
        color = SOLUTION_COLORS[min(index, len(SOLUTION_COLORS) - 1)]
        _plot_row_series(axes, f"times-solution-{index}", name, "^", color, pairs)
    cpu = rows[0].cpu_timing
    axes.set_xlabel("time per call, ms (log)" + (
        "; CPU wall times beside T_SOL of a GPU: not comparable, shown for scale" if cpu
        else ""))
    axes.set_title(f"measured times per workload on {platform}", fontsize=10)
    axes.legend(loc="best", fontsize=7)
    return render_svg(figure, salt=f"times-{platform}")


def workload_speedups(results: Sequence[MeasuredWorkload], platform: str) -> str | None:
    """Each passing candidate's speedup over eager PyTorch, per workload on `platform` (1 is
    eager's speed). None when no candidate passed beside a timed eager baseline."""
    rows = _workload_rows(results, platform)
    series = _candidate_rows(
        rows, lambda r, c: r.eager_ms / c.latency_ms if r.eager_ms and c.latency_ms else None)
    if not any(value is not None for _, pairs in series for _, value in pairs):
        return None
    figure, axes = _row_figure(rows)
    for index, (name, pairs) in enumerate(series):
        color = SOLUTION_COLORS[min(index, len(SOLUTION_COLORS) - 1)]
        _plot_row_series(axes, f"speedup-solution-{index}", name, "^", color, pairs)
    axes.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes.set_xlabel("speedup over eager PyTorch (log; 1 = eager)")
    axes.set_title(f"speedup over eager per workload on {platform}", fontsize=10)
    axes.legend(loc="best", fontsize=7)
    return render_svg(figure, salt=f"speedups-{platform}")


def _workload_rows(results: Sequence[MeasuredWorkload], platform: str) -> list[MeasuredWorkload]:
    """The workloads measured on `platform`, by tier and problem; at most MAX_WORKLOAD_ROWS."""
    rows = [r for r in results if r.platform == platform]
    rows.sort(key=lambda r: (tier_rank(r.tier), r.problem, r.workload))
    return rows[:MAX_WORKLOAD_ROWS]


def _row_figure(rows: Sequence[MeasuredWorkload]) -> tuple[Figure, Axes]:
    figure = _figure(width=7.5, height=1.2 + 0.28 * len(rows))
    axes = figure.add_subplot()
    axes.set_yticks(range(len(rows)),
                    [f"{r.problem.rsplit('/', 1)[-1][:36]} {r.workload[:8]}" for r in rows],
                    fontsize=7)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xscale("log")
    axes.grid(True, axis="x", which="major", linewidth=0.3)
    return figure, axes


def _candidate_rows(rows: Sequence[MeasuredWorkload], value
                    ) -> list[tuple[str, list[tuple[int, float | None]]]]:
    """(row, value) of each passing candidate, one series per solution, most points first;
    solutions past the palette share one "other solutions" series."""
    by_name: dict[str, list[tuple[int, float | None]]] = {}
    for index, result in enumerate(rows):
        for candidate in result.candidates:
            if candidate.status == PASSED:
                by_name.setdefault(candidate.solution, []).append(
                    (index, value(result, candidate)))
    ordered = sorted(by_name.items(), key=lambda item: (-len(item[1]), item[0]))
    if len(ordered) <= len(SOLUTION_COLORS):
        return ordered
    shown = len(SOLUTION_COLORS) - 1
    merged = [pair for _, pairs in ordered[shown:] for pair in pairs]
    return [*ordered[:shown], ("other solutions", merged)]


def _plot_row_series(axes: Axes, gid: str, label: str, marker: str, color: str,
                     pairs: list[tuple[int, float | None]]) -> None:
    shown = [(row, value) for row, value in pairs if value is not None and value > 0]
    if not shown:
        return
    axes.plot([value for _, value in shown], [row for row, _ in shown], linestyle="none",
              marker=marker, markersize=6, color=color, alpha=0.8, gid=gid,
              label=f"{label} ({len(shown)})")


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError("the report draws its charts with matplotlib: "
                          "pip install 'solforge[plot]'") from None
    return Figure(figsize=(width, height), layout="constrained")
