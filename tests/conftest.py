"""Shared test helpers: problems written to a temporary folder from Python dicts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

# Triton kernels in the tests run in Triton's interpreter on the CPU.
os.environ.setdefault("TRITON_INTERPRET", "1")


def requires_gpu():
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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


@pytest.fixture
def make_problem(tmp_path):
    def make(definition: dict[str, Any], workloads: list[dict[str, Any]],
             name: str = "problem") -> Path:
        return write_problem(tmp_path / name, definition, workloads)

    return make
