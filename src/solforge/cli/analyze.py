"""`solforge analyze PROBLEM`: the speed-of-light table of every workload."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.choices import DEFAULT_FP32_POLICY, FP32_POLICIES
from solforge.cli.console import console as make_console
from solforge.format import duration_ms, si

console = make_console()


@app.command()
def analyze(
    problem: str = typer.Argument(..., help="Problem folder or bundled tier/name."),
    hardware: str = typer.Option("H200", help="Catalog GPU (H200, B200@1500MHz, ...) or a "
                                              "profile JSON written by `solforge calibrate`."),
    workload: str = typer.Option(None, help="Only this workload (uuid or a prefix of it)."),
    fp32_policy: str = typer.Option(DEFAULT_FP32_POLICY, help="How float32 products are priced: "
                                    + "; ".join(f"{k}: {v}" for k, v in FP32_POLICIES.items())),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines: one JSON object per "
                                                       "workload, one per line."),
    top_ops: int = typer.Option(8, help="Ops shown in the per-op breakdown."),
) -> None:
    """FLOPs per unit, fused and unfused bytes, the binding bound and T_SOL for each workload."""
    from solforge.hardware import load_profile
    from solforge.problem.suite import open_problem
    from solforge.solar import analyze_workload

    loaded = open_problem(problem)
    profile = load_profile(hardware)
    workloads = [loaded.workload(workload)] if workload else list(loaded.workloads)
    results = [analyze_workload(loaded, w, profile, fp32_policy) for w in workloads]
    if as_json:
        for result in results:
            print(json.dumps(result.to_json()))
        return
    console.print(f"[bold]{loaded.name}[/] on {profile.describe()}", highlight=False)
    console.print(f"fp32 products: {fp32_policy} ({FP32_POLICIES[fp32_policy]})",
                  highlight=False)
    console.print(_workload_table(loaded, results))
    largest = max(results, key=lambda r: r.t_sol_ms)
    console.print(_ops_table(largest, top_ops))
    for note in sorted({n for r in results for n in r.notes}):
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def _workload_table(problem, results: list) -> Table:
    table = Table(title="speed of light per workload", title_justify="left")
    for column in ("workload", "axes", "tensor-core FLOPs", "CUDA-core FLOPs", "fused bytes",
                   "unfused bytes", "FLOP/byte", "bound", "T_SOL", "unfused", "cache-aware"):
        table.add_column(column, justify="left" if column in {"workload", "axes"} else "right")
    var_axes = problem.definition.var_axes
    for r in results:
        intensity = sum(r.flops.values()) / r.bytes_fused if r.bytes_fused else float("inf")
        table.add_row(
            r.workload[:8], " ".join(f"{a}={r.axes[a]}" for a in var_axes),
            _flops_cell(r.flops, "tensor."), _flops_cell(r.flops, "simt."),
            si(r.bytes_fused, "B"), si(r.bytes_unfused, "B"), f"{intensity:.3g}",
            f"{r.bound} ({r.binding_unit})", duration_ms(r.t_sol_ms),
            duration_ms(r.t_unfused_ms), duration_ms(r.t_cache_aware_ms),
        )
    return table


def _flops_cell(flops: dict[str, float], prefix: str) -> str:
    """"273 M bf16" for the units of one kind (several units listed by size)."""
    parts = [(v, u.removeprefix(prefix)) for u, v in flops.items() if u.startswith(prefix) and v]
    return ", ".join(f"{si(v)} {unit}" for v, unit in sorted(parts, reverse=True)) or "0"


def _ops_table(result, top: int) -> Table:
    title = f"per-op breakdown, workload {result.workload[:8]} (roofline time of each op alone)"
    table = Table(title=title, title_justify="left")
    for column in ("op", "calls", "FLOPs", "bytes", "roofline", "share"):
        table.add_column(column, justify="left" if column == "op" else "right")
    total = sum(o.roofline_ms for o in result.ops) or 1.0
    for op in result.ops[:top]:
        table.add_row(op.op, str(op.calls), si(op.flops), si(op.bytes, "B"),
                      duration_ms(op.roofline_ms), f"{100 * op.roofline_ms / total:.0f}%")
    if len(result.ops) > top:
        table.add_row(f"... {len(result.ops) - top} more", "", "", "", "", "")
    return table
