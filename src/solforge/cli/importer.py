"""`solforge import FORMAT PATH -o DIR`: problems from other formats, written in solforge's.

Each source format is one command of the `import` group; add another with
`@import_app.command("name")` in this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from solforge.cli.app import app
from solforge.problem.kernelbench import import_kernelbench_dir, import_kernelbench_file

import_app = typer.Typer(name="import", help="Import problems from other formats.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")

console = Console()


@import_app.command("kernelbench")
def kernelbench(
    path: Annotated[Path, typer.Argument(
        exists=True, help="A KernelBench problem file, or a folder of them (searched "
                          "recursively, sub-folders such as level1/ kept).")],
    out: Annotated[Path, typer.Option("--out", "-o",
                                      help="Folder to write problem folders into.")],
    name: Annotated[str | None, typer.Option(
        help="Problem name for a single file (default: the file name without .py).")] = None,
) -> None:
    """Turn KernelBench `Model` / `get_inputs` / `get_init_inputs` files into problems."""
    if path.is_file():
        folder = import_kernelbench_file(path, out, name)
        console.print(f"[green]ok[/] {path} -> {folder}", highlight=False)
        return
    if name is not None:
        raise typer.BadParameter("--name applies to a single file, not a folder")
    results = import_kernelbench_dir(path, out)
    for result in results:
        if result.ok:
            console.print(f"[green]ok[/] {result.source} -> {result.folder}", highlight=False)
        else:
            console.print(f"[red]failed[/] {result.error}", highlight=False, soft_wrap=True)
    failed = sum(not r.ok for r in results)
    console.print(f"{len(results) - failed} of {len(results)} files imported into {out}",
                  highlight=False)
    if failed:
        raise typer.Exit(1)
