"""The evaluation harness: runs candidates in their own process, checks them, times them.

    from solforge.data import load_solution
    from solforge.harness import EvalConfig, evaluate
    traces = evaluate(problem, load_solution("solution.json"), EvalConfig(device="cuda"))

The driver (evaluate.py) is trusted and never runs candidate code; each candidate runs in a fresh
worker process (worker.py) that it leads through a fixed protocol (protocol.py) over an
authenticated channel (channel.py). The driver computes every reference itself (oracle.py),
compares (compare.py), re-checks timed outputs (judge.py) and holds every time to the
speed-of-light floor (sol.py). Guards in the worker (guards.py) catch monkey-patching, background
threads and forks; solforge.measure times. Results are FlashInfer-Trace records
(solforge.data.trace). The formats are re-exported here for callers of the harness alone.
"""

from solforge.data.solution import Solution, SolutionError, load_solution, parse_solution
from solforge.data.trace import Status, Trace, append_traces, read_traces
from solforge.harness.evaluate import EvalConfig, evaluate, evaluate_reference
from solforge.harness.session import Limits

__all__ = [
    "EvalConfig",
    "Limits",
    "Solution",
    "SolutionError",
    "Status",
    "Trace",
    "append_traces",
    "evaluate",
    "evaluate_reference",
    "load_solution",
    "parse_solution",
    "read_traces",
]
