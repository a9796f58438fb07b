"""One unit of evaluation work, run in the current process: what every runner's worker does.

The unit goes through the harness unchanged (`evaluate` or `evaluate_reference`), so the
candidate still runs in a fresh harness worker process of its own, below this one. An error
the user can act on (a bad problem address, a malformed solution) is returned, not raised:
retrying it would fail the same way.

`python -m solforge.runners.unit TASK RESULT` is the local runner's fresh process per unit: it
reads a pickled EvalTask and writes a pickled Outcome (the two files are the runner's own, in a
folder only it can read). SIGTERM ends it through SystemExit, so the harness's cleanup kills
the candidate's process group on the way out.

`python -m solforge.runners.unit --wait DEVICE [LIKE]` is a spare started ahead of need: it
imports everything, initialises CUDA and pre-spawns the harness worker of its first role, then
reads its one task from stdin; it serves that unit alone and exits, like a fresh process. The
harness takes a waiting worker only for the same environment and sandbox policy, and the policy
depends on the problem, so the spare prepares the worker of LIKE (a task file: the unit just
started on its slot, the likeliest shape of the next one); without LIKE it prepares none.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from solforge.data.solution import parse_solution
from solforge.errors import SolforgeError
from solforge.harness.evaluate import evaluate, evaluate_reference
from solforge.harness.phases import as_dict, collecting, phase, record
from solforge.problem.suite import open_problem
from solforge.runners.base import EvalTask, Outcome

SPAWNED_AT_ENV = "SOLFORGE_UNIT_SPAWNED_AT"  # time.time() when the runner started the process


def execute(task: EvalTask, started_s: float = 0.0) -> Outcome:
    """Evaluate one unit here; its traces, or the reason it could not run, with the phases
    its time went to (`started_s`: seconds this process took to start, charged to
    `unit_start`)."""
    start = time.perf_counter()
    with collecting() as log:
        record("unit_start", started_s)
        try:
            with phase("problem_load"):
                problem = open_problem(task.problem)
            if task.solution is None:
                traces = evaluate_reference(problem, task.baseline, task.config)
            else:
                traces = evaluate(problem, parse_solution(task.solution), task.config)
        except SolforgeError as exc:
            return Outcome(error=str(exc), seconds=time.perf_counter() - start)
    return Outcome(tuple(traces), seconds=time.perf_counter() - start,
                   phases=as_dict(log.totals()))


def startup_seconds() -> float:
    """Seconds since the runner spawned this process (0 when it did not say)."""
    try:
        return max(0.0, time.time() - float(os.environ[SPAWNED_AT_ENV]))
    except (KeyError, ValueError):
        return 0.0


def wait_for_task(device_type: str, like: Path | None = None) -> tuple[Path, Path, float] | None:
    """A spare unit process (`--wait DEVICE [LIKE]`): initialise CUDA and start the harness
    worker a unit like `like` would take, then wait for the runner's line
    `TASK<TAB>RESULT<TAB>ASSIGNED_AT` on stdin (None at EOF: the runner no longer needs this
    process). Returns the files and the seconds between the assignment and now (what is left
    of this process's start when the task came early)."""
    import torch

    if device_type == "cuda" and torch.cuda.is_available():
        torch.cuda.init()
    if like is not None:
        prepare_like(like)
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        return None
    task, result, assigned_at = line.split("\t")
    return Path(task), Path(result), max(0.0, time.time() - float(assigned_at))


def prepare_like(task_file: Path) -> bool:
    """Start the harness worker that a unit of the same problem and configuration as the task
    in `task_file` takes first (keyed like the one `evaluate` takes, see harness/pool.py),
    read the stores that unit will read (T_SOL, the baselines: kept in this process, read again
    only if they change) and make its comparison kernel ready. False, with the reason on
    stderr, when that task cannot be read: the next unit then starts its worker itself, as
    without a spare."""
    from solforge.harness.evaluate import EvaluationRun

    try:
        task = pickle.loads(task_file.read_bytes())
        run = EvaluationRun(open_problem(task.problem), task.config)
        run.prepare_workers(1)
    except (OSError, pickle.UnpicklingError, RuntimeError, ValueError, SolforgeError) as exc:
        print(f"spare: no worker prepared ahead ({type(exc).__name__}: {exc})", file=sys.stderr)
        return False
    with contextlib.suppress(Exception):  # a head start only: the unit does it all again
        for workload in run.workloads:
            run.speed_of_light(workload)
        run.missing_baselines()
        run.warm_comparisons()
    return True


def main(task_file: Path, result_file: Path, started_s: float | None = None) -> None:
    signal.signal(signal.SIGTERM, _exit_on_signal)
    task = pickle.loads(task_file.read_bytes())
    outcome = execute(task, startup_seconds() if started_s is None else started_s)
    partial = result_file.with_suffix(".part")
    partial.write_bytes(pickle.dumps(outcome))
    partial.replace(result_file)  # a result file exists only once it is whole


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    if sys.argv[1] == "--wait":
        signal.signal(signal.SIGTERM, _exit_on_signal)
        assigned = wait_for_task(sys.argv[2], Path(sys.argv[3]) if len(sys.argv) > 3 else None)
        if assigned is not None:
            main(*assigned)
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
