"""Shared test helpers: the tests' folders and problems written from Python dicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
EXPLOITS = TESTS / "exploits"


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
