"""The bundled problems (package data) and the `tier/name` addresses that reach them."""

from __future__ import annotations

from pathlib import Path

from solforge.errors import ProblemError
from solforge.problem.problem import DEFINITION_FILE, Problem, load_problem

BUNDLED_ROOT = Path(__file__).resolve().parent.parent / "problems"
TIERS = ("l1", "l2", "quant", "fib")


def bundled_problem_dirs(tier: str | None = None) -> list[Path]:
    tiers = [tier] if tier else list(TIERS)
    found: list[Path] = []
    for name in tiers:
        folder = BUNDLED_ROOT / name
        if folder.is_dir():
            found.extend(sorted(p.parent for p in folder.glob(f"*/{DEFINITION_FILE}")))
    return found


def address_of(folder: Path) -> str:
    """`tier/name` for a bundled folder, else the path as given."""
    try:
        return folder.resolve().relative_to(BUNDLED_ROOT).as_posix()
    except ValueError:
        return str(folder)


def tier_of(folder: Path) -> str | None:
    address = address_of(folder)
    head = address.split("/", 1)[0]
    return head if head in TIERS and "/" in address else None


def resolve_problem_dir(address: str | Path) -> Path:
    """A folder on disk wins; otherwise `tier/name` (or a unique bare name) in the bundle."""
    path = Path(address)
    if (path / DEFINITION_FILE).is_file():
        return path
    bundled = BUNDLED_ROOT / str(address)
    if (bundled / DEFINITION_FILE).is_file():
        return bundled
    matches = [p for p in bundled_problem_dirs() if p.name == str(address)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(address_of(p) for p in matches)
        raise ProblemError(address, "<address>", f"ambiguous problem name; use one of {names}")
    raise ProblemError(address, "<address>",
                       "neither a problem folder (with definition.json) nor a bundled problem "
                       "(see `solforge problems list`)")


def open_problem(address: str | Path) -> Problem:
    return load_problem(resolve_problem_dir(address))
