"""`solforge analyze PROBLEM`: the speed-of-light table of every workload."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.choices import DEFAULT_FP32_POLICY, FP32_POLICIES
from solforge.cli.console import console as make_console
from solforge.cli.tables import compact_table
from solforge.humanize import duration_ms, number, si, si_unit, time_unit

console = make_console()


@app.command()
def analyze(
    problem: str = typer.Argument(..., help="Problem folder or bundled tier/name."),
    hardware: str = typer.Option(None, help="Catalog GPU (H200, B200@1500MHz, ...) or a "
                                            "profile JSON written by `solforge calibrate` "
                                            "(default: the GPU present, else H200)."),
    workload: str = typer.Option(None, help="Only this workload (uuid or a prefix of it)."),
    fp32_policy: str = typer.Option(DEFAULT_FP32_POLICY, help="How float32 products are priced: "
                                    + "; ".join(f"{k}: {v}" for k, v in FP32_POLICIES.items())),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines: one JSON object per "
                                                       "workload, one per line."),
    top_ops: int = typer.Option(8, help="Ops shown in the per-op breakdown."),
) -> None:
    """FLOPs per unit, fused and unfused bytes, the binding bound and T_SOL for each workload."""
    from solforge.defaults import resolve_run
    from solforge.problem.suite import open_problem
    from solforge.solar import analyze_workload

    loaded = open_problem(problem)
    profile = resolve_run(hardware=hardware).profile()
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
    """One row per workload, readable at 80 columns: one unit per column in its header; the
    unfused bytes, the FLOPs per unit and the intensity are in --json."""
    byte_unit, byte_factor = si_unit((r.bytes_fused for r in results), "B")
    time_label, factor = time_unit(r.t_sol_ms for r in results)
    var_axes = problem.definition.var_axes
    if len(var_axes) == 1:  # the axis name goes in the header once
        axes = {var_axes[0]: [str(r.axes[var_axes[0]]) for r in results]}
    else:
        axes = {"axes": [" ".join(f"{a}={r.axes[a]}" for a in var_axes) or "-"
                         for r in results]}
    columns = {
        "workload": [r.workload[:8] for r in results],
        **axes,
        "FLOPs": [_flops_cell(r.flops) for r in results],
        f"fused {byte_unit}": [number(r.bytes_fused * byte_factor) for r in results],
        "bound by": [r.binding_unit for r in results],
        f"T_SOL {time_label}": [number(r.t_sol_ms * factor) for r in results],
        "unfused": [number(r.t_unfused_ms * factor) for r in results],
        "cached": [number(r.t_cache_aware_ms * factor) for r in results],
    }
    return compact_table("speed of light per workload (unfused: every op's own traffic; "
                         "cached: traffic that fits on chip left out)", columns,
                         text={"workload", "axes", "FLOPs", "bound by"})


def _flops_cell(flops: dict[str, float]) -> str:
    """"5.64G bf16": all FLOPs, named by the unit doing most of them ("0" for none); the
    count per unit is in --json."""
    total = sum(flops.values())
    if not total:
        return "0"
    unit = max(flops, key=flops.__getitem__).split(".", 1)[-1]
    return f"{si(total).replace(' ', '')} {unit}"


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
