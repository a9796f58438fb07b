"""Issue 13: do units that share a GPU (`--per-gpu N`) time what a unit alone times?

    python benchmarks/sharing_fidelity.py OUTDIR [PROBLEM ...] [--per-gpu 3]
        [--deadline-s 300] [--device cuda|cpu] [--name h200]

The shipped solutions of the PROBLEMs (default: six fast L1 problems) benched twice through
`solforge bench`'s loop, each run into a results store of its own: with one unit on the GPU,
then with `--per-gpu` units side by side (their correctness rounds and warm-ups together,
their timed calls one at a time: harness/device_lock.py). The baselines come from the
machine's baseline store, as in any bench (import the committed ones first), so the solutions
are what is timed. Then per solution and workload both median times and their ratio (shared /
alone).

Writes OUTDIR/NAME-sharing-fidelity.json: the pairs, the median and the largest |ratio - 1|
(the run-to-run budget of issue 13 is 3%), each run's wall seconds (what sharing saves), the
environment. Resumable: a run cut by the deadline leaves its store, and the same command goes
on (a run already complete is not run again; its seconds are those recorded then).
`--device cpu` (with `--per-gpu 1`: no GPU to share) runs both the same way, a plain
run-to-run check.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import log, recorded_environment  # noqa: E402

from solforge.bench.plan import find_solutions, plan_problems, solution_folders  # noqa: E402
from solforge.bench.results import ProblemResults, read_results  # noqa: E402
from solforge.bench.run import BenchConfig, run_bench  # noqa: E402
from solforge.defaults import DEFAULT_BASELINE  # noqa: E402
from solforge.errors import SolforgeError  # noqa: E402
from solforge.storage import open_store  # noqa: E402

PROBLEMS = ("l1/rmsnorm_llama3_1_8b", "l1/swiglu_llama3_1_8b", "l1/gelu_tanh_flux_1_dev",
            "l1/softmax_llama3_1_8b_vocab", "l1/cross_entropy_llama3_1_8b",
            "l1/rope_llama3_1_8b")
MARGIN_S = 15.0  # kept for writing the record


@dataclass(frozen=True)
class Pair:
    solution: str
    workload: str
    alone_ms: float
    shared_ms: float

    @property
    def ratio(self) -> float:
        return self.shared_ms / self.alone_ms


def pairs(alone: list[ProblemResults], shared: list[ProblemResults]) -> list[Pair]:
    """Every solution workload that passed in both runs, with its two median times."""
    theirs = {(r.address, name, uuid): m for r in shared
              for name, outcomes in r.solutions.items() for uuid, m in outcomes.items()}
    found = []
    for results in alone:
        for name, outcomes in results.solutions.items():
            for uuid, mine in outcomes.items():
                other = theirs.get((results.address, name, uuid))
                if mine.passed and other is not None and other.passed:
                    found.append(Pair(name, uuid, mine.latency_ms, other.latency_ms))
    return found


def summary(found: list[Pair]) -> dict[str, Any]:
    deviations = [abs(p.ratio - 1.0) for p in found]
    worst = max(found, key=lambda p: abs(p.ratio - 1.0), default=None)
    return {
        "workloads": len(found),
        "median_ratio": statistics.median(p.ratio for p in found) if found else None,
        "median_abs_deviation": statistics.median(deviations) if deviations else None,
        "largest_abs_deviation": max(deviations, default=None),
        "largest_at": worst and {"solution": worst.solution, "workload": worst.workload,
                                 "ratio": worst.ratio},
    }


def bench(out: Path, label: str, per_gpu: int, problems: list[str], device: str,
          deadline: float) -> dict[str, Any]:
    """One run into OUTDIR/sharing-LABEL.db; its wall seconds, whether it finished, its results."""
    store = open_store(f"sqlite:///{out / f'sharing-{label}.db'}")
    found = find_solutions(solution_folders([], bundled=True))
    planned = plan_problems(problems, found, device)
    left_s = deadline - time.monotonic() - MARGIN_S
    config = BenchConfig(device=device, baseline=DEFAULT_BASELINE[device], per_gpu=per_gpu,
                         deadline_s=max(1.0, left_s),
                         command=f"benchmarks/sharing_fidelity.py --per-gpu {per_gpu}")
    began = time.monotonic()
    outcome = run_bench(planned, store, config)
    seconds = time.monotonic() - began
    log(f"{label} (--per-gpu {per_gpu}): {outcome.measured} traces measured, "
        f"{outcome.skipped} stored earlier, {seconds:.1f} s"
        + (f", {outcome.left} units left" if outcome.left else ""))
    return {"seconds": seconds, "measured": outcome.measured, "left": outcome.left,
            "complete": not outcome.left and not outcome.interrupted,
            "results": read_results(store, outcome)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--per-gpu", type=int, default=3)
    parser.add_argument("--deadline-s", type=float, default=300.0)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    name = args.name or ("h200" if args.device == "cuda" else "cpu")
    deadline = time.monotonic() + args.deadline_s
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{name}-sharing-fidelity.json"
    earlier = json.loads(target.read_text()) if target.is_file() else {}
    runs = {}
    try:
        for label, per_gpu in (("alone", 1), ("shared", args.per_gpu)):
            kept = earlier.get("runs", {}).get(label)
            kept = kept if kept and kept["per_gpu"] == per_gpu else None
            run = bench(args.out, label, per_gpu, args.problems, args.device, deadline)
            # the seconds of every call of the run (a complete one adds only a store read)
            spent = (kept["seconds"] if kept else 0.0) + (
                0.0 if kept and kept["complete"] else run["seconds"])
            measured = (kept["measured"] if kept else 0) + run["measured"]
            runs[label] = {**run, "per_gpu": per_gpu, "seconds": round(spent, 2),
                           "measured": measured}
    except SolforgeError as exc:
        raise SystemExit(f"sharing_fidelity.py: {exc}") from None
    found = pairs(runs["alone"]["results"], runs["shared"]["results"]) if len(runs) == 2 else []
    record = {
        "what": "the same shipped solutions timed with one unit on the GPU and with several "
                "sharing it (--per-gpu): per workload, shared / alone median time",
        "date": datetime.date.today().isoformat(),
        "device": args.device, "environment": recorded_environment(args.device),
        "problems": args.problems,
        "runs": {label: {k: v for k, v in run.items() if k != "results"}
                 for label, run in runs.items()},
        **summary(found),
        "pairs": [{"solution": p.solution, "workload": p.workload, "alone_ms": p.alone_ms,
                   "shared_ms": p.shared_ms, "ratio": round(p.ratio, 4)} for p in found],
    }
    target.write_text(json.dumps(record, indent=1) + "\n")
    log(f"wrote {target}: {record['workloads']} workloads, median ratio "
        f"{record['median_ratio']}, largest deviation {record['largest_abs_deviation']}")


if __name__ == "__main__":
    main()
