"""`solforge bench`: T_SOL, the eager and torch.compile baselines and every solution of a set of
problems, measured through the harness into the results store, resumable, then summarized.

    problems = plan_problems(["l1"], find_solutions(solution_folders([], bundled=True)), "cuda")
    outcome = run_bench(problems, open_store(None), BenchConfig(device="cuda"))

plan.py says what to run, run.py runs it (one worker per role and problem, one commit per
trace), results.py reads it back from the store and summary.py prints the tables.
"""

from solforge.bench.plan import BenchProblem, find_solutions, plan_problems, solution_folders
from solforge.bench.run import BenchConfig, BenchOutcome, run_bench
from solforge.storage import open_store

__all__ = [
    "BenchConfig",
    "BenchOutcome",
    "BenchProblem",
    "find_solutions",
    "open_store",
    "plan_problems",
    "run_bench",
    "solution_folders",
]
