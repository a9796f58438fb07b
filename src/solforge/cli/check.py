"""`solforge check PROBLEM`."""

from __future__ import annotations

import typer

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.humanize import plural

console = make_console()


@app.command()
def check(problem: str = typer.Argument(..., help="Problem folder or bundled tier/name.")) -> None:
    """Validate a problem and run its reference once on the CPU at its smallest workload."""
    from solforge.problem.check import check_problem

    report = check_problem(problem)
    shapes = ", ".join(f"{n} {list(s)}" for n, s in report.outputs.items())
    axes = ", ".join(f"{k}={v}" for k, v in report.axes.items())
    console.print(f"[green]ok[/] {report.problem}: {plural(report.workloads, 'workload')} valid; "
                  f"reference ran at {report.workload} ({axes}) in {report.seconds:.2f} s "
                  f"-> {shapes}", highlight=False)
