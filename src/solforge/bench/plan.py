"""What `solforge bench` runs: the problems named on the command line and their solutions.

Problems are named as suites (`all`, or a tier: `l1`, `l2`, `quant`, `fib`), bundled `tier/name`
addresses or problem folders. A solution belongs to the problem whose definition name its
`definition` field holds; the bundled ones live in `src/solforge/solutions/<tier>/<problem>/`
and `--solutions DIR` adds every solution JSON under DIR. With no problem named, the bench runs
the whole bundled suite on a GPU, and on the CPU only the problems that have solutions, so the
README's first command shows a real result within minutes on any machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from solforge.data.solution import Solution, SolutionError, load_solution
from solforge.errors import SolforgeError
from solforge.problem.problem import Problem, load_problem
from solforge.problem.suite import (
    TIERS,
    address_of,
    bundled_problem_dirs,
    resolve_problem_dir,
    tier_of,
)

SUITES = ("all", *TIERS)
BUNDLED_SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
CPU_MODE = ("CPU mode: the smallest workload of each problem on the CPU (Triton through its "
            "interpreter). CPU timings are not comparable with GPU times, and SOL scores are "
            "not computed.")


@dataclass(frozen=True)
class BenchProblem:
    address: str  # tier/name for a bundled problem, else the folder as given
    tier: str | None
    problem: Problem
    solutions: tuple[Solution, ...]


@dataclass(frozen=True)
class FoundSolutions:
    by_definition: dict[str, tuple[Solution, ...]]
    skipped: tuple[str, ...]  # "file: why it is not used", one per file left out


def find_solutions(folders: Sequence[Path]) -> FoundSolutions:
    """Every solution JSON under `folders`, by definition name. A file that is not a solution,
    names no definition, or repeats the name of one found earlier is left out, with the reason."""
    found: dict[str, list[Solution]] = {}
    first_file: dict[tuple[str, str], Path] = {}
    skipped: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            raise SolforgeError(f"--solutions {folder}: no such folder")
        for path in sorted(folder.rglob("*.json")):
            try:
                solution = load_solution(path)
            except SolutionError as exc:
                skipped.append(str(exc))
                continue
            key = (solution.definition, solution.name)
            if not solution.definition:
                skipped.append(f"{path}: no `definition` field names its problem")
            elif key in first_file:
                skipped.append(f"{path}: a solution named {solution.name!r} for "
                               f"{solution.definition} was found first in {first_file[key]}")
            else:
                first_file[key] = path
                found.setdefault(solution.definition, []).append(solution)
    by_definition = {name: tuple(solutions) for name, solutions in found.items()}
    return FoundSolutions(by_definition, tuple(skipped))


def solution_folders(extra: Sequence[Path], bundled: bool) -> list[Path]:
    folders = [BUNDLED_SOLUTIONS] if bundled and BUNDLED_SOLUTIONS.is_dir() else []
    return folders + list(extra)


def plan_problems(targets: Sequence[str], solutions: FoundSolutions,
                  device_type: str) -> list[BenchProblem]:
    """The problems to bench, in the order named (each once), with their solutions."""
    folders = problem_folders(targets) if targets else default_folders(solutions, device_type)
    planned = []
    for folder in folders:
        problem = load_problem(folder)
        planned.append(BenchProblem(address_of(folder), tier_of(folder), problem,
                                    solutions.by_definition.get(problem.name, ())))
    return planned


def problem_folders(targets: Sequence[str]) -> list[Path]:
    folders: dict[Path, None] = {}  # an ordered set: a problem named twice runs once
    for target in targets:
        named = (bundled_problem_dirs(None if target == "all" else target)
                 if target in SUITES else [resolve_problem_dir(target)])
        folders.update((folder.resolve(), None) for folder in named)
    return list(folders)


def default_folders(solutions: FoundSolutions, device_type: str) -> list[Path]:
    """The whole bundled suite on a GPU; on the CPU, the bundled problems with solutions."""
    suite = bundled_problem_dirs()
    if device_type != "cpu":
        return suite
    with_solutions = [folder for folder in suite if folder.name in solutions.by_definition]
    if not with_solutions:
        raise SolforgeError("no bundled problem has a solution to bench on the CPU: name the "
                            "problems (solforge bench l1/rmsnorm_llama3_1_8b) or give "
                            "--solutions DIR")
    return with_solutions
