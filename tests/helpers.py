"""Shared test helpers: the tests' folders, problems written from Python dicts, and module
fixtures that compute only what the selected tests read (the quick subset selects fewer)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
EXPLOITS = TESTS / "exploits"


def benchmark_script(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def random_inputs(definition: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {name: {"type": "random"} for name in definition["inputs"]}


def write_problem(folder: Path, definition: dict[str, Any],
                  workloads: list[dict[str, Any]]) -> Path:
    """A problem folder holding `definition` and one workload line per entry of `workloads`.

    A workload given as {"axes": {...}} gets a uuid and random sources for every input.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(definition, indent=1))
    lines = []
    for number, workload in enumerate(workloads):
        if "workload" not in workload:  # not a flashinfer-trace wrapped line
            workload = {"uuid": f"w{number}", "inputs": random_inputs(definition), **workload}
        lines.append(json.dumps(workload))
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


class Computed(dict):
    """Results by key from `compute(keys) -> results in that order`, a batch at a time.

    A module fixture fetches what its module's selected tests read (`selected_keys`) in one
    batch, side by side; a key no test asked for ahead is computed when it is first read."""

    def __init__(self, compute: Callable[[list[Any]], Sequence[Any]]) -> None:
        super().__init__()
        self._compute = compute

    def fetch(self, keys: Iterable[Hashable]) -> Computed:
        missing = [key for key in dict.fromkeys(keys) if key not in self]
        if missing:
            self.update(zip(missing, self._compute(missing), strict=True))
        return self

    def __missing__(self, key: Hashable) -> Any:
        return self.fetch([key])[key]


def side_by_side(compute_one: Callable[[Any], Any],
                 workers: int = 3) -> Callable[[list[Any]], list[Any]]:
    """`compute_one` over a batch of keys, a few at a time (each evaluation is mostly worker
    processes waiting on a torch import)."""
    def compute(keys: list[Any]) -> list[Any]:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(compute_one, keys))

    return compute


def selected_keys(request: pytest.FixtureRequest, argname: str | None = None,
                  reads: dict[str, Iterable[Any]] | None = None) -> list[Any]:
    """What the selected tests of the requesting module that use the requesting fixture read
    from it: the values of their parameter `argname`, and the keys `reads` names for a test
    function (by its name)."""
    keys: list[Any] = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module or \
                request.fixturename not in getattr(item, "fixturenames", ()):
            continue
        callspec = getattr(item, "callspec", None)
        if argname is not None and callspec is not None and argname in callspec.params:
            keys.append(callspec.params[argname])
        keys.extend((reads or {}).get(getattr(item, "originalname", item.name), ()))
    return keys
