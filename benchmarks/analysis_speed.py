"""Time the speed-of-light analysis of every bundled problem (all workloads), on the CPU.

Targets (issue 2): the whole bundled suite in under 30 s on a 2-core machine, and under 2 s for
any one problem. The first problem also pays the one-time cost of importing and warming up
PyTorch's fake-tensor machinery; that is reported separately, not hidden.

    python benchmarks/analysis_speed.py [-o benchmarks/results/analysis-speed-cpu.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

from solforge.hardware import load_profile
from solforge.problem.suite import address_of, bundled_problem_dirs, open_problem
from solforge.solar import analyze_workload


def time_problem(address: str, hardware: str) -> dict:
    start = time.perf_counter()
    problem = open_problem(address)
    profile = load_profile(hardware)
    results = [analyze_workload(problem, w, profile) for w in problem.workloads]
    seconds = time.perf_counter() - start
    return {"problem": address, "workloads": len(results), "seconds": round(seconds, 3),
            "unknown_ops": sorted({u for r in results for u in r.unknown_ops})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path,
                        default=Path("benchmarks/results/analysis-speed-cpu.json"))
    parser.add_argument("--hardware", default="H200")
    args = parser.parse_args()
    addresses = [address_of(d) for d in bundled_problem_dirs()]
    warmup_start = time.perf_counter()
    time_problem(addresses[0], args.hardware)  # imports, fake-tensor mode, op tables
    warmup = time.perf_counter() - warmup_start
    suite_start = time.perf_counter()
    rows = [time_problem(a, args.hardware) for a in addresses]
    suite = time.perf_counter() - suite_start
    record = {
        "what": "solforge analyze over every workload of every bundled problem",
        "date": datetime.date.today().isoformat(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "hardware_profile": args.hardware,
        "first_call_seconds_including_warmup": round(warmup, 3),
        "suite_seconds": round(suite, 3),
        "slowest_problem_seconds": max(r["seconds"] for r in rows),
        "problems": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    for row in rows:
        print(f"{row['problem']:<48} {row['workloads']:>3} workloads {row['seconds']:7.3f} s")
    print(f"suite: {suite:.2f} s for {len(rows)} problems; first call with warm-up {warmup:.2f} s;"
          f" slowest problem {record['slowest_problem_seconds']:.2f} s -> {args.output}")


if __name__ == "__main__":
    main()
