"""`solforge bench [SUITE|PROBLEM...]`: T_SOL, the eager and torch.compile baselines and every
solution of a set of problems, into the results store (resumable), then the summary tables."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.cli.tables import compact_table
from solforge.failures import failure_cause
from solforge.humanize import number, plural, time_range, time_unit
from solforge.storage import store_scope

MAX_FAILURES_SHOWN = 10
console = make_console()
progress_console = make_console(stderr=True)


@app.command("bench")
def bench_command(
    targets: Annotated[list[str] | None, typer.Argument(
        help="Suites (all, l1, l2, quant, fib), bundled tier/name addresses or problem "
             "folders. Default: the whole suite on a GPU; on the CPU, the problems that have "
             "solutions.")] = None,
    solutions: Annotated[list[Path] | None, typer.Option(
        "--solutions", help="A folder of solution JSON files, matched to problems by their "
                            "`definition` (repeatable; added to the bundled solutions).")] = None,
    bundled: bool = typer.Option(True, "--bundled/--no-bundled",
                                 help="Include the bundled solutions."),
    device: str = typer.Option(None, help="cuda or cpu (default: cuda when available)."),
    hardware: str = typer.Option(None, help="Hardware for T_SOL: a catalog name (H200), "
                                            "NAME@MHz, or a profile JSON (default: the GPU; "
                                            "H200 on the CPU)."),
    baseline: str = typer.Option(None, help="T_b: eager, compile or best (default: best on a "
                                            "GPU; eager on the CPU, where torch.compile builds "
                                            "C++ for ~10 s per problem)."),
    db: str = typer.Option(None, "--db", help="Database URL (default: sqlite:///solforge.db in "
                                              "the working directory; PostgreSQL by URL)."),
    runner: str = typer.Option("local", help="Where the units run: local (one process per "
                                             "GPU, or per core on the CPU) or ray."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="With --runner ray: auto (the cluster this machine "
                                         "belongs to) or HOST:PORT of its head node (default: "
                                         "start a Ray instance on this machine)."),
    workers: int = typer.Option(None, "--workers", help="Units evaluated at once (default: one "
                                                        "per visible GPU, per core on the CPU, "
                                                        "or the Ray cluster's GPUs / CPUs)."),
    per_gpu: int = typer.Option(1, "--per-gpu", help="Local runner: units that share each GPU "
                                                     "(2-8): their correctness rounds side by "
                                                     "side, their timed calls one at a time."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure again what the store holds."),
    library: bool = typer.Option(False, "--library",
                                 help="Also time the library baseline that fits each problem "
                                      "(kept in each trace: T_lib and S against it)."),
    timeout: float = typer.Option(180.0, help="Seconds allowed per workload, and for the "
                                              "import of a solution."),
    minutes: float = typer.Option(None, "--time", help="Start no unit after this many minutes "
                                                       "(less the longest of the recent units) "
                                                       "and stop those still running then; the "
                                                       "same command later does the rest."),
) -> None:
    """Measure T_SOL, the baselines and every solution; store the traces; print the scores.

    Exits 0 when every solution passed every workload, 1 when one did not (or a unit could not
    run), 2 on bad input, 3 when --time ran out with units left, 130 when interrupted."""
    import torch

    from solforge.bench.plan import CPU_MODE, find_solutions, plan_problems, solution_folders
    from solforge.bench.progress import ProgressBar
    from solforge.bench.results import read_results
    from solforge.bench.run import BenchConfig, run_bench
    from solforge.bench.summary import footnote, problem_line, tier_lines
    from solforge.defaults import resolve_run
    from solforge.harness.session import Limits

    run = resolve_run(device, hardware, baseline, remote=runner == "ray")
    device_type, chosen = run.device_type, run.baseline
    config = BenchConfig(device=run.device, hardware=run.hardware, baseline=chosen,
                         fresh=fresh, limits=Limits(timeout, timeout), runner=runner,
                         workers=workers, per_gpu=per_gpu, ray_address=ray_address,
                         library=library,
                         command=shlex.join(["solforge", *sys.argv[1:]]),
                         deadline_s=None if minutes is None else 60 * minutes)
    found = find_solutions(solution_folders(solutions or [], bundled))
    for reason in found.skipped:
        console.print(f"[yellow]not a usable solution:[/] {escape(reason)}", highlight=False)
    problems = plan_problems(targets or [], found, device_type)
    if device_type == "cpu":
        gpu = "" if torch.cuda.is_available() else "No CUDA GPU found. "
        console.print(f"[bold yellow]{gpu}{CPU_MODE}[/]", highlight=False)
    count = sum(len(p.solutions) for p in problems)
    with store_scope(db) as store:
        console.print(f"{plural(len(problems), 'problem')}, {plural(count, 'solution')}; "
                      f"results in {store.url}", highlight=False)
        with ProgressBar(progress_console) as bar:
            outcome = run_bench(problems, store, config, bar)
    if outcome.interrupted:
        console.print(f"interrupted: {plural(outcome.measured, 'trace')} saved in {store.url} (run "
                      f"{outcome.run_id}); run the same command again to resume.",
                      highlight=False)
        raise typer.Exit(130)
    for failure in outcome.failures:
        console.print(f"[red]could not run:[/] {escape(failure)}", highlight=False)
    scored = outcome.device == "cuda"
    results = read_results(store, outcome)
    lines = [problem_line(problem, chosen, scored) for problem in results]
    for table in problem_tables(lines, outcome.profile):
        console.print(table)
    console.print(tier_table(tier_lines(results, chosen, scored)))
    console.print(footnote(scored, chosen, outcome.profile), highlight=False)
    console.print(f"{plural(outcome.measured, 'trace')} measured, {outcome.skipped} already "
                  f"stored; run {outcome.run_id} in {store.url} (`solforge export -o FILE` "
                  f"writes them as JSONL)", highlight=False)
    if outcome.left:
        console.print(f"--time ran out: {plural(outcome.left, 'unit')} not started; run the "
                      "same command again to go on", highlight=False)
    # With units left, a workload without a trace is not a failure: only a failed trace is.
    incomplete = [] if outcome.left else incomplete_problems(results)
    failed = failure_lines(store, outcome) if incomplete or outcome.left else []
    if incomplete or outcome.failures or failed:
        for line in failed:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        console.print(f"not every workload passed: {', '.join(incomplete) or 'see above'} "
                      "(`solforge eval PROBLEM SOLUTION --verbose` prints a whole log)",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if outcome.left:
        raise typer.Exit(3)


def failure_lines(store, outcome, limit: int = MAX_FAILURES_SHOWN) -> list[str]:
    """One line per failed trace of this bench: where, and the cause (the compiler's first
    error or the exception), at most `limit` of them."""
    lines = []
    for stored in outcome.problems:
        uuids = {wid: uuid for uuid, wid in stored.workload_ids.items()}
        names = {sid: name for name, sid in stored.solution_ids.items()}
        for row in store.find_traces(list(uuids), list(names), outcome.device, outcome.hardware):
            if row.status != "PASSED":
                log = row.record.get("evaluation", {}).get("log")
                lines.append(f"{stored.address} {names[row.solution_id]} "
                             f"{uuids[row.workload_id][:8]} {row.status}: {failure_cause(log)}")
    if len(lines) > limit:
        return [*lines[:limit], f"... and {len(lines) - limit} more failed traces"]
    return lines


def incomplete_problems(results: list) -> list[str]:
    """The problems where some solution did not pass every benched workload (a workload with
    no trace, a unit that could not run, counts as not passed): they make the exit status 1."""
    from solforge.bench.summary import solution_line

    return [problem.address for problem in results
            if any(solution_line(problem, name, outcomes, "eager", False).passed
                   < len(problem.workloads) for name, outcomes in problem.solutions.items())]


def problem_tables(lines: list, profile: str) -> tuple[Table, Table]:
    """Per problem, two tables that each fit 80 columns: the times (T_SOL and the baselines,
    one unit per column, in its header) and the best solution. Columns without a single value
    are left out (torch.compile, S and the speedup over it on the CPU)."""
    t_sol_unit, t_sol = time_unit(t for line in lines for t in line.t_sol_ms)
    eager_unit, eager = time_unit(t for line in lines for t in line.eager_ms)
    compile_unit, compiled = time_unit(t for line in lines for t in line.compile_ms)
    problems = [line.address for line in lines]
    times = {
        "problem": problems,
        "workloads": [str(max(len(line.t_sol_ms), len(line.eager_ms))) for line in lines],
        f"T_SOL {t_sol_unit}": [time_range(line.t_sol_ms, t_sol) for line in lines],
        f"eager {eager_unit}": [time_range(line.eager_ms, eager) for line in lines],
        f"compile {compile_unit}": [time_range(line.compile_ms, compiled) for line in lines],
    }
    best = {
        "problem": problems,
        "best solution": [line.best.name if line.best else "-" for line in lines],
        "passed": [f"{line.best.passed}/{line.best.count}" if line.best else "-"
                   for line in lines],
        "S": [_number(line.best.sol_score if line.best else None, "{:.3f}") for line in lines],
        "x eager": [_speedup(line.best.speedup_eager if line.best else None) for line in lines],
        "x compile": [_speedup(line.best.speedup_compile if line.best else None)
                      for line in lines],
    }
    return (compact_table(f"solforge bench: times per problem (lowest-highest over its "
                          f"workloads; T_SOL on {profile})", times, text={"problem"}),
            compact_table("solforge bench: best solution per problem", best,
                          text={"problem", "best solution"}))


def tier_table(lines: list) -> Table:
    columns = {
        "tier": [line.tier for line in lines],
        "problems": [str(line.problems) for line in lines],
        "with sol.": [str(line.with_solutions) for line in lines],
        "all passed": [str(line.all_passed) for line in lines],
        "S compile": [_number(line.compile_sol_score, "{:.3f}") for line in lines],
        "S best": [_number(line.sol_score, "{:.3f}") for line in lines],
        "T_SOL/T_k": [_number(line.fraction_of_sol, "{:.3f}") for line in lines],
        "x eager": [_speedup(line.speedup_eager) for line in lines],
    }
    return compact_table("solforge bench: per tier (medians over problems)", columns, text={"tier"})


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{number(value)}x"


def _number(value: float | None, template: str) -> str:
    return "-" if value is None else template.format(value)
