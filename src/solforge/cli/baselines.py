"""`solforge baselines export|import|list`: the signed store of measured T_b, moved between
machines (a fresh GPU machine imports the committed baselines and starts warm)."""

from __future__ import annotations

from pathlib import Path

import typer

from solforge.cli.app import app
from solforge.cli.console import console as make_console

console = make_console()
baselines_app = typer.Typer(help="Measured baselines (T_b): export, import, list.",
                            no_args_is_help=True)
app.add_typer(baselines_app, name="baselines")

CACHE_HELP = "The harness cache folder (default ~/.cache/solforge)."


def _cache(cache_dir: Path | None):
    from solforge.harness.baseline import BaselineCache
    from solforge.harness.evaluate import default_cache_dir

    return BaselineCache((cache_dir or default_cache_dir()) / "baselines.jsonl")


@baselines_app.command("export")
def export(out: Path = typer.Argument(..., help="The JSON file to write."),
           cache_dir: Path = typer.Option(None, help=CACHE_HELP)) -> None:
    """Write every validly signed baseline to one JSON file."""
    from solforge.harness.baseline import export_baselines

    console.print(f"exported {export_baselines(_cache(cache_dir), out)} baselines to {out}")


@baselines_app.command("import")
def import_(source: Path = typer.Argument(..., help="A file written by `baselines export`."),
            cache_dir: Path = typer.Option(None, help=CACHE_HELP)) -> None:
    """Trust the baselines of SOURCE: sign them into this machine's store."""
    from solforge.harness.baseline import import_baselines

    console.print(f"imported {import_baselines(_cache(cache_dir), source)} baselines")


@baselines_app.command("list")
def list_(cache_dir: Path = typer.Option(None, help=CACHE_HELP)) -> None:
    """The stored baselines: problem, workload, kind, hardware, median."""
    for entry in _cache(cache_dir).entries().values():
        console.print(f"{entry.get('definition')} {str(entry.get('workload'))[:8]} "
                      f"{entry.get('kind')} {entry.get('hardware')} "
                      f"{entry['median_ms']:.4f} ms", highlight=False)
