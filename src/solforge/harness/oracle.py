"""The reference outputs, computed by the trusted driver on its own inputs.

The candidate's process never holds an expected output: the driver regenerates the inputs of a
round (or of a timed call) from the seed it handed out, runs the definition's reference on them
in its own process, and compares. Mutating inputs, reading the reference through `gc`, or
getting the reference's freed output back from the caching allocator therefore find nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.data.workload import Workload
from solforge.problem.inputs import make_inputs
from solforge.problem.outputs import OutputMismatch, as_output_list, check_outputs
from solforge.problem.problem import Problem, tensor_shape
from solforge.problem.reference import describe_exception, load_reference_module


class ReferenceFailure(Exception):
    """The reference raised or returned the wrong outputs: INVALID_REFERENCE."""


class ReferenceOracle:
    def __init__(self, problem: Problem, device: torch.device) -> None:
        self.problem = problem
        self.device = device
        self.module = load_reference_module(problem.definition,
                                            problem.root / "definition.json")

    def output_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        axes = self.problem.axes(workload)
        return {n: tensor_shape(s, axes) for n, s in self.problem.definition.outputs.items()}

    def expected(self, workload: Workload, seed: int) -> list[Any]:
        inputs = make_inputs(self.problem, workload, self.device, seed)
        try:
            with torch.no_grad():
                result = self.module.run(*inputs.values())
            values = as_output_list(result, self.problem.definition)
            check_outputs(values, self.problem.definition, self.output_shapes(workload))
        except OutputMismatch as exc:
            raise ReferenceFailure(f"reference outputs do not fit the definition: {exc}") from None
        except Exception as exc:
            raise ReferenceFailure(f"reference raised {describe_exception(exc)}") from None
        return values
