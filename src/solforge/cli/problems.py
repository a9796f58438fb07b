"""`solforge problems list`: the bundled suite, one row per problem, to find its addresses."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.choices import TIERS
from solforge.cli.console import console as make_console
from solforge.cli.tables import compact_table
from solforge.errors import ProblemError
from solforge.humanize import plural

problems_app = typer.Typer(name="problems", help="The bundled problem suite.",
                           no_args_is_help=True)
app.add_typer(problems_app, name="problems")

console = make_console()
SUMMARY_CHARS = 60  # of a description in the table (--json keeps it whole)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class SuiteEntry:
    address: str  # tier/name, accepted wherever a problem is
    op_type: str
    summary: str  # the description's first sentence (which names the model), whole
    workloads: int
    var_axes: tuple[str, ...]
    error: str | None = None  # why the problem does not load


@problems_app.command("list")
def list_problems(
    tier: Annotated[str | None, typer.Option(help=f"Only this tier ({', '.join(TIERS)}).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per problem per line.")]
    = False,
) -> None:
    """Address, op type, model, workload count and var axes of every bundled problem."""
    from solforge.problem.suite import bundled_problem_dirs

    if tier is not None and tier not in TIERS:
        raise typer.BadParameter(f"{tier!r} is not one of {', '.join(TIERS)}", param_hint="--tier")
    rows = [problem_row(folder) for folder in bundled_problem_dirs(tier)]
    if as_json:
        for row in rows:
            print(json.dumps(asdict(row)))
        return
    console.print(problems_table(rows))


def problems_table(rows: list[SuiteEntry]) -> Table:
    """One row per problem, readable at 80 columns (descriptions cut; --json keeps them)."""
    columns = {
        "address": [row.address for row in rows],
        "op type": [row.op_type for row in rows],
        "model / description": [shorten(row.summary) if row.error is None
                                else f"does not load: {row.error}" for row in rows],
        "wl": [str(row.workloads) for row in rows],
        "var axes": [" ".join(row.var_axes) or "-" for row in rows],
    }
    title = (f"{plural(len(rows), 'bundled problem')} (wl: workloads; --json gives whole "
             "descriptions)")
    return compact_table(title, columns, text={"address", "op type", "model / description",
                                               "var axes"})


def problem_row(folder: Path) -> SuiteEntry:
    from solforge.problem.problem import load_problem
    from solforge.problem.suite import address_of

    address = address_of(folder)
    try:
        problem = load_problem(folder)
    except ProblemError as exc:
        return SuiteEntry(address, "?", "", 0, (), error=f"{exc.field}: {exc.reason}")
    definition = problem.definition
    return SuiteEntry(address, definition.op_type, first_sentence(definition.description or ""),
                      len(problem.workloads), tuple(definition.var_axes))


def first_sentence(text: str) -> str:
    """The text up to its first sentence end."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def shorten(text: str, limit: int = SUMMARY_CHARS) -> str:
    """`text` cut to `limit` characters at a word boundary, with "..." when cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."
