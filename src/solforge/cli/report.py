"""`solforge report`: the results store as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.humanize import plural
from solforge.storage import open_store

console = make_console()


@app.command()
def report(
    db: Annotated[str | None, typer.Option(
        "--db", help="The store: a SQLite file path or a database URL (default: "
                     "./solforge.db).")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")
                      ] = Path("report.html"),
    runs: Annotated[list[int] | None, typer.Option(
        "--run", help="Only the traces of this run (repeat for several; default: all).")] = None,
) -> None:
    """SOL scores per tier, rooflines, a per-problem table and a leaderboard, in one HTML file.

    Results of the CPU mode get their time and speedup charts, and no ranking."""
    from solforge.report import gather, render

    data = gather(open_store(db, must_exist=True), runs or ())
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(data))
    console.print(f"wrote {output}: {plural(len(data.results), 'workload measurement')} from "
                  f"{plural(len(data.runs), 'run')}", highlight=False)
