"""One unit of evaluation work, run in the current process: what every runner's worker does.

The unit goes through the harness unchanged (`evaluate` or `evaluate_reference`), so the
candidate still runs in a fresh harness worker process of its own, below this one. An error
the user can act on (a bad problem address, a malformed solution) is returned, not raised:
retrying it would fail the same way.

`python -m solforge.runners.unit TASK RESULT` is the local runner's fresh process per unit: it
reads a pickled EvalTask and writes a pickled Outcome (the two files are the runner's own, in a
folder only it can read). SIGTERM ends it through SystemExit, so the harness's cleanup kills
the candidate's process group on the way out.
"""

from __future__ import annotations

import pickle
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from solforge.data.solution import parse_solution
from solforge.errors import SolforgeError
from solforge.harness.evaluate import evaluate, evaluate_reference
from solforge.problem.suite import open_problem
from solforge.runners.base import EvalTask, Outcome


def execute(task: EvalTask) -> Outcome:
    """Evaluate one unit here; its traces, or the reason it could not run."""
    start = time.perf_counter()
    try:
        problem = open_problem(task.problem)
        if task.solution is None:
            traces = evaluate_reference(problem, task.baseline, task.config)
        else:
            traces = evaluate(problem, parse_solution(task.solution), task.config)
    except SolforgeError as exc:
        return Outcome(error=str(exc), seconds=time.perf_counter() - start)
    return Outcome(tuple(traces), seconds=time.perf_counter() - start)


def main(task_file: Path, result_file: Path) -> None:
    signal.signal(signal.SIGTERM, _exit_on_signal)
    task = pickle.loads(task_file.read_bytes())
    outcome = execute(task)
    partial = result_file.with_suffix(".part")
    partial.write_bytes(pickle.dumps(outcome))
    partial.replace(result_file)  # a result file exists only once it is whole


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
