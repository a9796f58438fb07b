"""`solforge check`: validate a problem and run its reference once on the CPU."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.errors import ProblemError
from solforge.problem.inputs import make_inputs
from solforge.problem.outputs import OutputMismatch, as_output_list, check_outputs
from solforge.problem.problem import Problem, tensor_shape
from solforge.problem.reference import describe_exception, load_reference_module
from solforge.problem.suite import open_problem


@dataclass(frozen=True)
class CheckReport:
    problem: str
    folder: Path
    workloads: int
    workload: str  # the uuid run
    axes: dict[str, int]
    outputs: dict[str, tuple[int, ...]]
    seconds: float


def run_reference(problem: Problem, workload_uuid: str | None = None,
                  device: str = "cpu", seed: int = 0) -> tuple[list, dict[str, int]]:
    """Run the reference at one workload; every failure becomes a ProblemError."""
    workload = problem.workload(workload_uuid) if workload_uuid else problem.smallest_workload()
    file = problem.root / "definition.json"
    module = load_reference_module(problem.definition, file)
    inputs = make_inputs(problem, workload, device, seed)
    axes = problem.axes(workload)
    try:
        with torch.no_grad():
            result = module.run(*inputs.values())
    except Exception as exc:
        reason = f"run() raised at workload {workload.uuid}: {describe_exception(exc)}"
        raise ProblemError(file, "reference", reason) from None
    shapes = {n: tensor_shape(s, axes) for n, s in problem.definition.outputs.items()}
    try:
        values = as_output_list(result, problem.definition)
        check_outputs(values, problem.definition, shapes)
    except OutputMismatch as exc:
        reason = f"reference at workload {workload.uuid}: {exc}"
        raise ProblemError(file, "outputs", reason) from None
    return values, axes


def check_problem(address: str | Path) -> CheckReport:
    problem = open_problem(address)
    workload = problem.smallest_workload()
    start = time.perf_counter()
    values, axes = run_reference(problem, workload.uuid)
    seconds = time.perf_counter() - start
    outputs = {n: tuple(v.shape) if isinstance(v, torch.Tensor) else ()
               for n, v in zip(problem.definition.outputs, values)}
    return CheckReport(problem.name, problem.root, len(problem.workloads), workload.uuid, axes,
                       outputs, seconds)
