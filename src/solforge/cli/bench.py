"""`solforge bench [SUITE|PROBLEM...]`: T_SOL, the eager and torch.compile baselines and every
solution of a set of problems, into the results store (resumable), then the summary tables."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.table import Table

from solforge.bench.plan import CPU_MODE, find_solutions, plan_problems, solution_folders
from solforge.bench.progress import ProgressBar
from solforge.bench.results import read_results
from solforge.bench.run import BenchConfig, run_bench
from solforge.bench.summary import ProblemLine, TierLine, footnote, problem_line, tier_lines
from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.defaults import resolve_run
from solforge.harness.session import Limits
from solforge.humanize import duration_ms
from solforge.storage import open_store

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
    fresh: bool = typer.Option(False, "--fresh", help="Measure again what the store holds."),
    timeout: float = typer.Option(180.0, help="Seconds allowed per workload, and for the "
                                              "import of a solution."),
) -> None:
    """Measure T_SOL, the baselines and every solution; store the traces; print the scores."""
    run = resolve_run(device, hardware, baseline, remote=runner == "ray")
    device_type, chosen = run.device_type, run.baseline
    config = BenchConfig(device=run.device, hardware=run.hardware, baseline=chosen,
                         fresh=fresh, limits=Limits(timeout, timeout), runner=runner,
                         workers=workers, ray_address=ray_address,
                         command=shlex.join(["solforge", *sys.argv[1:]]))
    store = open_store(db)
    found = find_solutions(solution_folders(solutions or [], bundled))
    for reason in found.skipped:
        console.print(f"[yellow]not a usable solution:[/] {reason}", highlight=False)
    problems = plan_problems(targets or [], found, device_type)
    if device_type == "cpu":
        gpu = "" if torch.cuda.is_available() else "No CUDA GPU found. "
        console.print(f"[bold yellow]{gpu}{CPU_MODE}[/]", highlight=False)
    count = sum(len(p.solutions) for p in problems)
    console.print(f"{len(problems)} problems, {count} solutions; results in {store.url}",
                  highlight=False)
    with ProgressBar(progress_console) as bar:
        outcome = run_bench(problems, store, config, bar)
    if outcome.interrupted:
        console.print(f"interrupted: {outcome.measured} traces saved in {store.url} (run "
                      f"{outcome.run_id}); run the same command again to resume.",
                      highlight=False)
        raise typer.Exit(130)
    for failure in outcome.failures:
        console.print(f"[red]could not run:[/] {failure}", highlight=False)
    scored = outcome.device == "cuda"
    results = read_results(store, outcome)
    lines = [problem_line(problem, chosen, scored) for problem in results]
    console.print(_problem_table(lines, outcome.profile))
    console.print(_tier_table(tier_lines(results, chosen, scored)))
    console.print(footnote(scored, chosen, outcome.profile), highlight=False)
    console.print(f"{outcome.measured} traces measured, {outcome.skipped} already stored; "
                  f"run {outcome.run_id} in {store.url} (`solforge export -o FILE` writes "
                  f"them as JSONL)", highlight=False)


def _problem_table(lines: list[ProblemLine], profile: str) -> Table:
    table = Table(title="solforge bench: per problem", title_justify="left")
    for column in ("problem", "tier", f"T_SOL ({profile})", "eager", "torch.compile",
                   "best solution", "passed", "S", "vs eager", "vs compile"):
        text = column in ("problem", "tier", "best solution")
        table.add_column(column, justify="left" if text else "right",
                         overflow="fold" if text else "ellipsis")
    for line in lines:
        best = line.best
        table.add_row(
            line.address, line.tier or "-", _time_range(line.t_sol_ms),
            _time_range(line.eager_ms), _time_range(line.compile_ms),
            best.name if best else "-", f"{best.passed}/{best.count}" if best else "-",
            _number(best.sol_score if best else None, "{:.3f}"),
            _number(best.speedup_eager if best else None, "{:.3g}x"),
            _number(best.speedup_compile if best else None, "{:.3g}x"))
    return table


def _tier_table(lines: list[TierLine]) -> Table:
    table = Table(title="solforge bench: per tier (medians over problems)",
                  title_justify="left")
    for column in ("tier", "problems", "with solutions", "all passed", "S torch.compile",
                   "S solutions", "T_SOL/T_k", "speedup vs eager"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for line in lines:
        table.add_row(line.tier, str(line.problems), str(line.with_solutions),
                      str(line.all_passed), _number(line.compile_sol_score, "{:.3f}"),
                      _number(line.sol_score, "{:.3f}"), _number(line.fraction_of_sol, "{:.3f}"),
                      _number(line.speedup_eager, "{:.3g}x"))
    return table


def _time_range(times_ms: tuple[float, ...]) -> str:
    if not times_ms:
        return "-"
    low, high = min(times_ms), max(times_ms)
    return duration_ms(low) if low == high else f"{duration_ms(low)} - {duration_ms(high)}"


def _number(value: float | None, template: str) -> str:
    return "-" if value is None else template.format(value)
