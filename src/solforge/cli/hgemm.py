"""`solforge hgemm tune | bench | show`: the per-shape HGEMM tuner, its benchmark, its table."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table as RichTable

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.errors import SolforgeError
from solforge.humanize import plural

console = make_console()
hgemm_app = typer.Typer(name="hgemm", no_args_is_help=True,
                        help="HGEMM specialised per shape, with a dispatcher that never loses to "
                             "cuBLAS.")
app.add_typer(hgemm_app)

SETS_HELP = "Shape sets, comma-separated: grid (CUDA-L2's 1,000), decode, prefill."
SHAPE_HELP = "Extra shapes MxNxK (repeatable), in --dtype and --layout."


def _shapes(sets: str, shape: list[str], dtype: str, layout: str, accumulate: str):
    from solforge.hgemm.space import select_shapes

    names = [name for name in sets.split(",") if name]
    return select_shapes(names, shape, dtype, layout, accumulate)


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise SolforgeError("solforge hgemm tune and bench time kernels on a CUDA GPU; none here")


def _log(line: str) -> None:
    console.print(line, highlight=False)


def _report(what: str, report) -> None:
    console.print(f"{what}: {plural(report.done, 'shape')} in {report.seconds:.0f} s; "
                  f"{report.remaining} left (about {report.remaining_estimate_s:.0f} s more)",
                  highlight=False)


@hgemm_app.command()
def tune(
    table: Path = typer.Option(Path("hgemm-tune.jsonl"), help="The table (JSON lines); "
                               "shapes already in it are skipped."),
    sets: str = typer.Option("grid,decode,prefill", help=SETS_HELP),
    shape: list[str] = typer.Option([], help=SHAPE_HELP),
    dtype: str = typer.Option("float16", help="float16 | bfloat16 (for --shape)."),
    layout: str = typer.Option("nn", help="nn (B row-major) | nt (B = weight.T) (for --shape)."),
    accumulate: str = typer.Option("fp32", help="fp32 | fp16 (float16 shapes only)."),
    budget_s: float = typer.Option(540.0, help="Stop before this many seconds."),
    shortlist: int = typer.Option(10, help="Candidates per shape."),
) -> None:
    """Tune each shape beside the baselines and append it to the table (resumable)."""
    from solforge.hgemm.measure import CudaMeasurer
    from solforge.hgemm.tune import TuneSettings
    from solforge.hgemm.tune import tune as run_tune

    _require_cuda()
    shapes = _shapes(sets, shape, dtype, layout, accumulate)
    report = run_tune(shapes, table, CudaMeasurer(), TuneSettings(shortlist=shortlist),
                      budget_s, log=_log)
    _report("tuned", report)


@hgemm_app.command()
def bench(
    table: Path = typer.Option(Path("hgemm-tune.jsonl"), help="The tuned table to dispatch with."),
    rows: Path = typer.Option(Path("hgemm-bench.jsonl"), help="Benchmark rows (JSON lines); "
                              "shapes already in it are skipped."),
    sets: str = typer.Option("grid,decode,prefill", help=SETS_HELP),
    shape: list[str] = typer.Option([], help=SHAPE_HELP),
    dtype: str = typer.Option("float16", help="float16 | bfloat16 (for --shape)."),
    layout: str = typer.Option("nn", help="nn | nt (for --shape)."),
    modes: str = typer.Option("offline,server", help="offline and/or server (Poisson gaps)."),
    server_gap_ms: float = typer.Option(1.0, help="Mean gap between server-mode calls."),
    rounds: int = typer.Option(10, help="Timed calls per method, mode and timing (at least 32 "
                               "on shapes under 2^33 FLOPs, whose medians scatter most)."),
    budget_s: float = typer.Option(540.0, help="Stop before this many seconds."),
) -> None:
    """The dispatcher beside torch.matmul and cuBLASLt, offline and server mode (resumable)."""
    from solforge.hgemm import dispatch
    from solforge.hgemm.bench import BenchSettings
    from solforge.hgemm.bench import bench as run_bench
    from solforge.hgemm.measure import CudaMeasurer

    _require_cuda()
    dispatch.use_table(table, retrieval=False)
    settings = BenchSettings(rounds=rounds, modes=tuple(modes.split(",")),
                             server_gap_ms=server_gap_ms)
    shapes = _shapes(sets, shape, dtype, layout, "fp32")
    report = run_bench(shapes, rows, CudaMeasurer(), settings, budget_s, log=_log)
    _report("benchmarked", report)


@hgemm_app.command()
def show(
    table: Path = typer.Option(Path("hgemm-tune.jsonl"), help="The tuned table."),
    rows: Path = typer.Option(None, help="Benchmark rows, for the goal numbers."),
    output: Path = typer.Option(None, "-o", help="Write the summary here as .json and .md."),
) -> None:
    """What the table dispatches to and, with --rows, the goal numbers."""
    from solforge.hgemm.bench import load_rows, markdown, summarize
    from solforge.hgemm.table import load_table

    loaded = load_table(table)
    if not len(loaded):
        raise SolforgeError(f"{table}: no tuned shapes")
    _print_table(loaded)
    if rows is None:
        return
    found = load_rows(rows)
    summary = summarize(found, loaded)
    console.print(markdown(summary, found), highlight=False, markup=False)
    if output is not None:
        output.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
        output.with_suffix(".md").write_text(markdown(summary, found))
        console.print(f"wrote {output.with_suffix('.json')} and {output.with_suffix('.md')}",
                      highlight=False)


def _print_table(loaded) -> None:
    from solforge.hgemm.space import set_of

    counts: dict[tuple[str, str, str], int] = {}
    for entry in loaded:
        eager = entry.best.kernel if entry.use_kernel and entry.best else "torch.matmul"
        graph = entry.best.kernel if entry.use_in_graph and entry.best else "torch.matmul"
        key = (set_of(entry.shape), eager, graph)
        counts[key] = counts.get(key, 0) + 1
    view = RichTable(title=f"{len(loaded)} tuned shapes: what the dispatcher runs",
                     title_justify="left")
    for column in ("set", "runs eagerly", "runs in CUDA graphs", "shapes"):
        view.add_column(column, justify="right" if column == "shapes" else "left")
    for (name, eager, graph), count in sorted(counts.items()):
        view.add_row(name, eager, graph, str(count))
    console.print(view)
