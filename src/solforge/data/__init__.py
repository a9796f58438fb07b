"""The file formats, at the bottom of the package graph: every other package reads them from here.

Definition and Workload (FlashInfer-Trace / SOL-ExecBench problems), Solution (a candidate
kernel's sources) and Trace (one evaluation of one workload), with their readers and writers.
These modules import nothing of solforge but `errors`.
"""

from solforge.data.definition import Axis, Definition, TensorSpec, parse_definition
from solforge.data.solution import Solution, SolutionError, load_solution, parse_solution
from solforge.data.trace import Status, Trace, append_traces, read_traces
from solforge.data.workload import InputSource, Tolerance, Workload, parse_workload

__all__ = [
    "Axis", "Definition", "InputSource", "Solution", "SolutionError", "Status", "TensorSpec",
    "Tolerance", "Trace", "Workload", "append_traces", "load_solution", "parse_definition",
    "parse_solution", "parse_workload", "read_traces",
]
