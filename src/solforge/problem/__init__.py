"""Problems in the FlashInfer-Trace / SOL-ExecBench format: definitions, workloads, inputs."""

from solforge.data.definition import Axis, Definition, TensorSpec, parse_definition
from solforge.data.workload import InputSource, Tolerance, Workload, parse_workload
from solforge.problem.inputs import make_inputs
from solforge.problem.problem import Problem, load_problem, tensor_shape
from solforge.problem.suite import open_problem, resolve_problem_dir

__all__ = [
    "Axis", "Definition", "InputSource", "Problem", "TensorSpec", "Tolerance", "Workload",
    "load_problem", "make_inputs", "open_problem", "parse_definition", "parse_workload",
    "resolve_problem_dir", "tensor_shape",
]
