"""Where one evaluation's time goes, workload by workload: the per-phase table of issue 13.

    python benchmarks/eval_phases.py PROBLEM SOLUTION [-o OUT.json] [--device cuda|cpu]
        [--baseline eager|compile|best] [--runs 2] [--cache DIR] [--compile-ahead on|off|both]
        [--iterations N]

Evaluates SOLUTION on PROBLEM `--runs` times in this process with one cache folder: the first
run times the baselines (cold), later runs find them stored (warm). `--compile-ahead` sets
whether the torch.compile baseline's graphs are compiled ahead (harness/compile_ahead.py; off
by default in the harness); `both` first adds a cold run without, in a cache folder
of its own, so the two cold runs show what compiling ahead moves (`compile/compile_ahead`, the
wait for it; `compile/round_calls`, the worker's first calls, its compile included). Each run
prints its phase table (harness/phases.py: driver phases, among them `send_inputs`,
`take_outputs` and `compare`, plus `round_*` and `loop_*`, the worker's own account of its work
in the correctness rounds and the timed loops), the seconds between progress lines (one per
workload), and per workload the status, how inputs and outputs crossed (`handover`), the timed
iterations and the median. OUT.json keeps all of it with the machine it ran on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import log, recorded_environment  # noqa: E402

from solforge.data.solution import load_solution  # noqa: E402
from solforge.harness import EvalConfig, evaluate  # noqa: E402
from solforge.harness.phases import as_dict, collecting, format_table, merge  # noqa: E402
from solforge.problem import open_problem  # noqa: E402


def one_run(problem, solution, config: EvalConfig) -> dict:
    """One evaluation: its phases, the time between progress lines, a line per workload."""
    marks: list[tuple[float, str]] = []

    def progress(message: str) -> None:
        marks.append((time.perf_counter(), message))
        log(message)

    began = time.perf_counter()
    with collecting() as phases:
        traces = evaluate(problem, solution, config, progress=progress)
    wall = time.perf_counter() - began
    steps = [{"seconds": round(b[0] - a[0], 3), "after": a[1]}
             for a, b in zip([(began, "start"), *marks], [*marks, (began + wall, "end")])]
    table = merge([as_dict(phases.totals())])
    return {"wall_seconds": round(wall, 2), "phases": table, "steps": steps,
            "workloads": [_summary(t) for t in traces]}


def _summary(trace) -> dict:
    evaluation = trace.evaluation
    timing = evaluation.timing
    return {"workload": str(trace.workload.get("uuid", ""))[:8], "status": evaluation.status.value,
            "handover": timing.handover if timing else None,
            "iterations": timing.iterations if timing else None,
            "median_ms": timing.median_ms if timing else None,
            "first_call_ms": timing.first_call_ms if timing else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("solution", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--baseline", default="best", choices=("eager", "compile", "best"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--compile-ahead", default="on", choices=("on", "off", "both"))
    parser.add_argument("--iterations", type=int, default=None,
                        help="timed calls of each loop, exactly (default: the device's rule)")
    args = parser.parse_args(argv)
    problem = open_problem(args.problem)
    solution = load_solution(args.solution, problem.name)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="solforge-phases-"))
    config = EvalConfig(device=args.device, baseline=args.baseline, cache_dir=cache,
                        compile_ahead=args.compile_ahead != "off")
    if args.iterations is not None:  # per-call costs from many calls (the CPU's loop is 10)
        config = replace(config, iterations=args.iterations, min_iterations=0)
    plan = [("cold", config) if number == 0 else ("warm", config) for number in range(args.runs)]
    if args.compile_ahead == "both":
        without = replace(config, compile_ahead=False,
                          cache_dir=Path(tempfile.mkdtemp(prefix="solforge-phases-")))
        plan.insert(0, ("cold, not compiled ahead", without))
    runs = []
    for number, (label, run_config) in enumerate(plan):
        run = one_run(problem, solution, run_config)
        run["compile_ahead"] = run_config.compile_ahead
        runs.append(run)
        print(f"run {number + 1} ({label}): {run['wall_seconds']} s")
        print(format_table(run["phases"]))
        for line in run["workloads"]:
            print(json.dumps(line))
    if args.output:
        record = {"what": "one evaluation's phases, cold then warm", "date":
                  datetime.date.today().isoformat(), "problem": args.problem,
                  "solution": solution.name, "device": args.device, "baseline": args.baseline,
                  "iterations": args.iterations,
                  "environment": recorded_environment(args.device), "runs": runs}
        args.output.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
