"""`solforge export` and `solforge import-traces`: the results store to and from
FlashInfer-Trace JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.humanize import plural
from solforge.storage import open_store, store_scope

console = make_console()
DB_HELP = "The store: a SQLite file path or a database URL (default: ./solforge.db)."


@app.command("export")
def export_command(
    output: Annotated[Path, typer.Option("-o", "--output", help="The JSONL file to write.")],
    db: str = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Write every trace in the store as FlashInfer-Trace JSONL."""
    store = open_store(db, must_exist=True)
    count = store.export_traces(output)
    console.print(f"wrote {plural(count, 'trace')} from {store.url} to {output}",
                  highlight=False)


@app.command("import-traces")
def import_traces_command(
    file: Annotated[Path, typer.Argument(help="FlashInfer-Trace JSONL (solforge export, "
                                              "eval -o).")],
    db: str = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Read trace records into the store.

    A trace already there for the same workload, solution, device and hardware is replaced."""
    with store_scope(db) as store:
        count = store.import_traces(file)
    console.print(f"imported {plural(count, 'trace')} from {file} into {store.url}",
                  highlight=False)
