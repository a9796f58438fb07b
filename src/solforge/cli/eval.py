"""`solforge eval PROBLEM SOLUTION`: evaluate a candidate kernel, write trace records."""

from __future__ import annotations

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.data.solution import load_solution
from solforge.data.trace import Status, Trace, append_traces, trace_line
from solforge.defaults import resolve_run
from solforge.harness.evaluate import EvalConfig, evaluate
from solforge.harness.session import Limits
from solforge.humanize import duration_ms
from solforge.problem.suite import open_problem
from solforge.score.rank import rate_traces

console = make_console()
progress_console = make_console(stderr=True)


@app.command("eval")
def eval_command(
    problem: str = typer.Argument(..., help="Problem folder or bundled tier/name."),
    solution: str = typer.Argument(..., help="Solution JSON, or a .py file whose run() "
                                             "returns the outputs."),
    device: str = typer.Option(None, help="cuda or cpu (default: cuda when available)."),
    hardware: str = typer.Option(None, help="Hardware for T_SOL: a catalog name (H200), "
                                            "NAME@MHz, or a profile JSON (default: the GPU)."),
    baseline: str = typer.Option(None, help="T_b: eager, compile, or best (the faster; default: "
                                            "best on a GPU, eager on the CPU)."),
    as_json: bool = typer.Option(False, "--json", help="Print one trace per line."),
    output: str = typer.Option(None, "-o", "--output", help="Append the traces to this JSONL."),
    workloads: str = typer.Option(None, help="Only these workloads: uuids (or prefixes), "
                                             "comma-separated."),
    smallest: int = typer.Option(None, help="Only the N smallest workloads (CPU default: 2)."),
    timing: str = typer.Option("kernel", help="GPU timing: kernel, events or graph."),
    iterations: int = typer.Option(None, help="Timed calls per workload (GPU default: 50)."),
    rounds: int = typer.Option(None, help="Correctness rounds per workload (GPU default: 5)."),
    seed: int = typer.Option(0, help="Public seed (a secret drawn per run is mixed in)."),
    timeout: float = typer.Option(180.0, help="Seconds allowed per workload, and for the "
                                              "import."),
) -> None:
    """Evaluate SOLUTION on the workloads of PROBLEM: correctness, timing, SOL score."""
    loaded = open_problem(problem)
    candidate = load_solution(solution, loaded.name)
    run = resolve_run(device, hardware, baseline)
    config = EvalConfig(
        device=run.device, hardware=run.hardware, baseline=run.baseline,
        workloads=tuple(w for w in (workloads or "").split(",") if w),
        smallest=smallest, timing=timing, iterations=iterations, rounds=rounds, seed=seed,
        limits=Limits(setup_timeout_s=timeout, workload_timeout_s=timeout))
    with progress_console.status("evaluating") as status:
        traces = evaluate(loaded, candidate, config, progress=status.update)
    if output is not None:
        append_traces(output, traces)
    if as_json:
        for trace in traces:
            typer.echo(trace_line(trace))
        return
    console.print(_table(traces, loaded.definition.var_axes))
    for trace in traces:
        if trace.status is not Status.PASSED:
            first = (trace.evaluation.log or "").strip().splitlines()[:1]
            console.print(f"[red]{trace.workload['uuid']}[/] {trace.status.value}: "
                          f"{first[0] if first else ''}", highlight=False)
    console.print(_summary(traces), highlight=False)


def _table(traces: list[Trace], var_axes: list[str]) -> Table:
    title = f"{traces[0].solution} on {traces[0].definition}" if traces else ""
    table = Table(title=title, title_justify="left")
    for column in ("workload", "axes", "status", "T_k", "T_b", "T_SOL", "S", "speedup",
                   "max abs err"):
        table.add_column(column, justify="left" if column in {"workload", "axes", "status"}
                         else "right")
    for trace in traces:
        evaluation = trace.evaluation
        performance, baseline = evaluation.performance, evaluation.baseline
        axes = trace.workload.get("axes", {})
        table.add_row(
            trace.workload["uuid"][:8], " ".join(f"{a}={axes[a]}" for a in var_axes if a in axes),
            f"[{'green' if evaluation.status is Status.PASSED else 'red'}]"
            f"{evaluation.status.value}[/]",
            _time(performance.latency_ms if performance else None),
            _time(baseline.latency_ms if baseline else None)
            + (f" ({baseline.chosen})" if baseline else ""),
            _time(evaluation.t_sol_ms),
            "-" if evaluation.sol_score is None else f"{evaluation.sol_score:.3f}",
            f"{performance.speedup_factor:.3g}x" if performance else "-",
            f"{evaluation.correctness.max_absolute_error:.2g}" if evaluation.correctness
            else "-",
        )
    return table


def _summary(traces: list[Trace]) -> str:
    passed = [t for t in traces if t.status is Status.PASSED]
    parts = [f"{len(passed)}/{len(traces)} passed"]
    rating = rate_traces(traces)  # a failed workload counts S = 0, as bench and report count it
    if rating.sol_score is not None:
        parts.append(f"mean SOL score {rating.sol_score:.3f}")
    if rating.speedup is not None:
        parts.append(f"geomean speedup {rating.speedup:.3g}x over T_b")
    labels = {t.evaluation.timing.label for t in passed if t.evaluation.timing}
    parts += sorted(labels)
    return "; ".join(parts)


def _time(ms: float | None) -> str:
    return "-" if ms is None else duration_ms(ms)

