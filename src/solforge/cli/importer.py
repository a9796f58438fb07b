"""`solforge import FORMAT PATH -o DIR`: problems from other formats, written in solforge's.

Each source format is one command of the `import` group; add another with
`@import_app.command("name")` in this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from solforge.cli.app import app
from solforge.cli.choices import TIERS
from solforge.cli.console import console as make_console
from solforge.humanize import plural

import_app = typer.Typer(name="import", help="Import problems from other formats.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")

console = make_console()


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
    from solforge.problem.kernelbench import import_kernelbench_dir, import_kernelbench_file

    if path.is_file():
        folder = import_kernelbench_file(path, out, name)
        console.print(f"[green]ok[/] {path} -> {folder}", highlight=False, soft_wrap=True)
        return
    if name is not None:
        raise typer.BadParameter("--name applies to a single file, not a folder")
    results = import_kernelbench_dir(path, out)
    for result in results:
        if result.ok:
            console.print(f"[green]ok[/] {result.source} -> {result.folder}", highlight=False,
                          soft_wrap=True)
        else:
            console.print(f"[red]failed[/] {result.error}", highlight=False, soft_wrap=True)
    failed = sum(not r.ok for r in results)
    console.print(f"{len(results) - failed} of {plural(len(results), 'file')} imported into {out}",
                  highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


BlobRoots = Annotated[list[Path] | None, typer.Option(
    "--blob-root", help="A folder that relative safetensors paths resolve against (repeatable), "
                        "e.g. a flashinfer-trace checkout for SOL-ExecBench's FlashInfer-Bench "
                        "problems.")]
ReferenceBlobs = Annotated[bool, typer.Option(
    "--reference-blobs", help="Point at the source safetensors files by a relative path "
                              "instead of copying them into each problem folder.")]


@import_app.command("sol-execbench")
def sol_execbench(
    path: Annotated[Path, typer.Argument(
        exists=True, help="Rows of nvidia/SOL-ExecBench (.jsonl, .json, or .parquet with "
                          "pyarrow), or problem folders (definition.json + workload.jsonl); "
                          "folders are searched recursively.")],
    out: Annotated[Path, typer.Option("--out", "-o",
                                      help="Folder to write <tier>/<name>/ problems into.")],
    tier: Annotated[str | None, typer.Option(
        help=f"Tier for every problem ({', '.join(TIERS)}); default: the config named in the "
             "path (L1, L2, Quant, FlashInfer-Bench).")] = None,
    blob_root: BlobRoots = None,
    reference_blobs: ReferenceBlobs = False,
) -> None:
    """Turn SOL-ExecBench problems into solforge problem folders."""
    from solforge.problem.datasets import import_sol_execbench

    if tier is not None and tier not in TIERS:
        raise typer.BadParameter(f"{tier!r} is not one of {', '.join(TIERS)}", param_hint="--tier")
    report = import_sol_execbench(path, out, tier=tier, blob_roots=blob_root or [],
                                  copy_blobs=not reference_blobs)
    _print_report(report, out)


@import_app.command("flashinfer-trace")
def flashinfer_trace(
    path: Annotated[Path, typer.Argument(
        exists=True, help="A flashinfer-trace dataset (definitions/ + workloads/ + blob/), or "
                          "problem folders (definition.json + workload.jsonl).")],
    out: Annotated[Path, typer.Option("--out", "-o",
                                      help="Folder to write fib/<name>/ problems into.")],
    blob_root: BlobRoots = None,
    reference_blobs: ReferenceBlobs = False,
) -> None:
    """Turn flashinfer-trace definitions and workloads into solforge problem folders."""
    from solforge.problem.datasets import import_flashinfer_trace

    report = import_flashinfer_trace(path, out, blob_roots=blob_root or [],
                                     copy_blobs=not reference_blobs)
    _print_report(report, out)


def _print_report(report, out: Path) -> None:
    for folder in report.written:
        console.print(f"[green]ok[/] {folder}", highlight=False, soft_wrap=True)
    for issue in report.issues:
        console.print(f"[red]skipped[/] {issue}", highlight=False, soft_wrap=True)
    console.print(f"{plural(len(report.written), 'problem')} written into {out}; "
                  f"{plural(len(report.issues), 'entry', 'entries')} skipped", highlight=False,
                  soft_wrap=True)
    if report.issues:
        raise typer.Exit(1)
