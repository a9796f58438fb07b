"""`solforge eval PROBLEM SOLUTION`: evaluate a candidate kernel, write trace records.

Exit status: 0 when every workload passed, 1 when one did not, 2 on bad input."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.choices import BASELINES
from solforge.cli.console import console as make_console
from solforge.cli.console import progress_lines
from solforge.cli.tables import EMPTY, compact_table
from solforge.errors import SolforgeError
from solforge.failures import failure_cause, wrong_problem_hint
from solforge.humanize import number, plural, time_unit

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
    baseline: str = typer.Option(None, help="T_b: eager, compile, or best (the faster). "
                                            "Default: best on a GPU; eager on the CPU, where "
                                            "torch.compile builds C++ for ~10 s per problem."),
    library: bool = typer.Option(False, "--library",
                                 help="Also time the library baseline that fits (cuDNN SDPA, "
                                      "cuBLASLt, FlashInfer RMSNorm) and score against it."),
    as_json: bool = typer.Option(False, "--json", help="Print one trace per line (JSON Lines)."),
    output: str = typer.Option(None, "-o", "--output", help="Append the traces to this JSONL."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Print the whole log of every failed workload."),
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
    """Evaluate SOLUTION on the workloads of PROBLEM: correctness, timing, SOL score.

    Exits 0 when every workload passed, 1 when one did not, 2 on bad input."""
    from solforge.data.solution import load_solution
    from solforge.data.trace import append_traces, trace_line
    from solforge.defaults import resolve_run
    from solforge.harness.evaluate import EvalConfig, evaluate
    from solforge.harness.session import Limits
    from solforge.problem.suite import open_problem

    if baseline is not None and baseline not in BASELINES:
        raise SolforgeError(f"--baseline {baseline!r}: expected one of {', '.join(BASELINES)}")
    loaded = open_problem(problem)
    candidate = load_solution(solution, loaded.name)
    run = resolve_run(device, hardware, baseline)
    kind = run.device_type
    config = EvalConfig(
        device=run.device, hardware=run.hardware, baseline=run.baseline,
        workloads=tuple(w for w in (workloads or "").split(",") if w),
        smallest=smallest, timing=timing, iterations=iterations, rounds=rounds, seed=seed,
        limits=Limits(setup_timeout_s=timeout, workload_timeout_s=timeout), library=library)
    if candidate.definition and candidate.definition != loaded.name:
        progress_console.print(f"[yellow]note:[/] {escape(candidate.name)} names the "
                               f"definition {escape(candidate.definition)!r}; evaluating it on "
                               f"{escape(loaded.name)!r}", highlight=False)
    with progress_lines(progress_console, "evaluating") as report:
        traces = evaluate(loaded, candidate, config, progress=report)
    if output is not None:
        append_traces(output, traces)
    failed = [t for t in traces if not _passed(t)]
    if as_json:
        for trace in traces:
            typer.echo(trace_line(trace))
        raise typer.Exit(1 if failed else 0)
    console.print(_table(traces, loaded.definition.var_axes))
    for note in dict.fromkeys(n for t in traces for n in t.evaluation.notes
                              if n.startswith("library baseline")):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if kind == "cpu":
        console.print("CPU mode: T_k and T_b are CPU wall times (Triton kernels run in its "
                      "interpreter, far slower than on a GPU); T_SOL is the GPU's bound, shown "
                      "for scale; no SOL score is computed.", highlight=False, soft_wrap=True)
    causes = []
    for trace in failed:
        cause = failure_cause(trace.evaluation.log)
        causes.append(cause)
        console.print(f"[red]{trace.workload['uuid'][:8]}[/] {trace.status.value}: "
                      f"{escape(cause)}", highlight=False, soft_wrap=True)
        if verbose and trace.evaluation.log:
            console.print(trace.evaluation.log.rstrip(), highlight=False, markup=False)
    if failed and not verbose:
        console.print("(--verbose prints the whole log of each failed workload; --json keeps "
                      "it in each trace)", highlight=False)
    hint = wrong_problem_hint(candidate.definition, loaded.name, causes) if failed else None
    if hint:
        console.print(f"[yellow]hint:[/] {escape(hint)}", highlight=False, soft_wrap=True)
    console.print(_summary(traces), highlight=False, soft_wrap=True)
    raise typer.Exit(1 if failed else 0)


def _passed(trace) -> bool:
    return trace.status.value == "PASSED"


def _table(traces: list, var_axes: list[str]) -> Table:
    """One row per workload, readable at 80 columns: one time unit per column, in its header
    (on the CPU, T_k and T_b are CPU wall times and T_SOL that of the GPU named)."""
    evaluations = [t.evaluation for t in traces]
    kernel = [e.performance.latency_ms if e.performance else None for e in evaluations]
    base = [e.baseline.latency_ms if e.baseline else None for e in evaluations]
    library = [e.baseline.library_ms if e.baseline else None for e in evaluations]
    bound = [e.t_sol_ms for e in evaluations]
    gpu = next((e.sol_hardware for e in evaluations if e.sol_hardware), None)
    columns: dict[str, list[str]] = {
        "workload": [t.workload["uuid"][:8] for t in traces],
        "axes": [" ".join(f"{a}={t.workload.get('axes', {})[a]}" for a in var_axes
                          if a in t.workload.get("axes", {})) or "-" for t in traces],
        "status": [e.status.value for e in evaluations],
    }
    for name, times in (("T_k", kernel), ("T_b", base), ("T_lib", library),
                        (f"T_SOL {gpu.split('-')[0]}" if gpu else "T_SOL", bound)):
        unit, factor = time_unit(t for t in times if t is not None)
        columns[f"{name} {unit}"] = [EMPTY if t is None else number(t * factor) for t in times]
    columns["T_b of"] = [e.baseline.chosen if e.baseline else EMPTY for e in evaluations]
    columns["S"] = [EMPTY if e.sol_score is None else f"{e.sol_score:.3f}" for e in evaluations]
    columns["S lib"] = [EMPTY if e.library_score is None else f"{e.library_score:.3f}"
                        for e in evaluations]
    columns["speedup"] = [f"{number(e.performance.speedup_factor)}x" if e.performance
                          else EMPTY for e in evaluations]
    columns["max err"] = [f"{e.correctness.max_absolute_error:.2g}" if e.correctness else EMPTY
                          for e in evaluations]
    title = f"{traces[0].solution} on {traces[0].definition}" if traces else ""
    return compact_table(title, columns, text={"workload", "axes", "status", "T_b of"})


def _summary(traces: list) -> str:
    from solforge.score.rank import rate_traces

    passed = [t for t in traces if _passed(t)]
    parts = [f"{len(passed)}/{plural(len(traces), 'workload')} passed"]
    rating = rate_traces(traces)  # a failed workload counts S = 0, as bench and report count it
    if rating.sol_score is not None:
        parts.append(f"mean SOL score {rating.sol_score:.3f}")
    if rating.speedup is not None:
        parts.append(f"geomean speedup {rating.speedup:.3g}x over T_b")
    labels = {t.evaluation.timing.label for t in passed if t.evaluation.timing}
    parts += sorted(labels)
    return "; ".join(parts)

