"""Evaluation throughput through a runner: candidates evaluated per minute with 1, 2, ...
workers, and the seconds each candidate holds its slot (GPU-seconds per candidate on a GPU).

Candidates are copies of honest solutions, each with a marker comment of its own, so every one
is a distinct solution to the harness (its own sources, build folder and worker process). The
reference baseline is measured first and not counted: a candidate's T_b then comes from the
baseline cache, as in a search. Each worker count starts from an empty harness cache.

On the CPU (the default): the honest PyTorch and Triton RMSNorms of the harness tests on
tests/fixtures/harness/rmsnorm_small, the bench's CPU settings (smallest workload, eager T_b,
Triton through its interpreter). On a GPU (`--device cuda`, run on the H200): the bundled
solutions of l1/rmsnorm_llama3_1_8b on all its workloads, T_b the faster of eager and
torch.compile. Markers do not change kernel code, so Triton's own cache may serve a kernel
compiled for an earlier copy; the GPU-seconds then leave out that first compile.

    python benchmarks/throughput_cpu.py OUT_DIR [--workers 1 2] [--candidates 8]
                                        [--device cpu|cuda] [--runner local|ray]
                                        [--ray-address HOST:PORT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from solforge.bench.run import CPU_WORKLOADS
from solforge.data.solution import load_solution, solution_from_python
from solforge.harness.evaluate import EvalConfig
from solforge.harness.phases import merge
from solforge.runners import EvalTask, TaskResult, open_runner

ROOT = Path(__file__).resolve().parent.parent
CPU_PROBLEM = ROOT / "tests" / "fixtures" / "harness" / "rmsnorm_small"
CPU_SEEDS = (ROOT / "tests" / "fixtures" / "harness" / "honest" / "pytorch_rmsnorm" /
             "solution.py",
             ROOT / "tests" / "fixtures" / "harness" / "honest" / "triton_rmsnorm" /
             "solution.json")
GPU_PROBLEM = "l1/rmsnorm_llama3_1_8b"
SLOT_SECONDS = {
    "local": "the lifetime of the unit's own process, its interpreter's start included",
    "ray": "the evaluation inside the Ray task; the start of its fresh Ray worker process "
           "(max_calls=1) is not included, but it is in the wall time",
}
GPU_SEEDS_DIR = ROOT / "src" / "solforge" / "solutions" / "l1" / "rmsnorm_llama3_1_8b"


def seed_solutions(device_type: str) -> list[dict[str, Any]]:
    if device_type == "cpu":
        python_seed, json_seed = CPU_SEEDS
        return [solution_from_python(python_seed.read_text(), "pytorch_rmsnorm",
                                     "rmsnorm_small").to_dict(),
                load_solution(json_seed, "rmsnorm_small").to_dict()]
    return [load_solution(path).to_dict() for path in sorted(GPU_SEEDS_DIR.glob("*.json"))]


def candidates(seeds: list[dict[str, Any]], count: int, tag: str) -> list[dict[str, Any]]:
    """`count` distinct copies of the seeds, in turn: a marker comment in the entry file."""
    made = []
    for number in range(count):
        seed = seeds[number % len(seeds)]
        entry = seed["spec"]["entry_point"].split("::")[0]
        sources = [{**source, "content": source["content"] + f"\n# candidate {tag}-{number}\n"}
                   if source["path"] == entry else source for source in seed["sources"]]
        made.append({**seed, "name": f"{seed['name']}_{tag}_{number}", "sources": sources})
    return made


def eval_config(device_type: str, cache: Path) -> EvalConfig:
    """The bench's settings for a device (bench/run.py)."""
    if device_type == "cpu":
        return EvalConfig(device="cpu", baseline="eager", smallest=CPU_WORKLOADS,
                          cache_dir=cache)
    return EvalConfig(device="cuda", baseline="best", cache_dir=cache)


def measure(args: argparse.Namespace, workers: int, problem: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="solforge-throughput-") as cache:
        config = eval_config(args.device, Path(cache))
        with open_runner(args.runner, args.device, workers, args.ray_address) as runner:
            for kind in ("eager", "compile") if config.baseline == "best" else ("eager",):
                runner.submit(EvalTask(problem, config, baseline=kind, key=kind))
            warmup = list(runner.results())
            start = time.perf_counter()
            for solution in candidates(seed_solutions(args.device), args.candidates,
                                       f"w{workers}"):
                runner.submit(EvalTask(problem, config, solution=solution,
                                       key=solution["name"]))
            results = list(runner.results())
            wall_s = time.perf_counter() - start
            slots = runner.slots
    return summary(workers, slots, wall_s, results, warmup)


def summary(workers: int, slots: int, wall_s: float, results: list[TaskResult],
            warmup: list[TaskResult]) -> dict[str, Any]:
    held = [result.seconds for result in results]
    statuses: dict[str, int] = {}
    for result in results:
        for trace in result.traces:
            statuses[trace.evaluation.status.value] = statuses.get(
                trace.evaluation.status.value, 0) + 1
    return {
        "workers": workers,
        "slots": slots,
        "candidates": len(results),
        "wall_seconds": round(wall_s, 2),
        "candidates_per_minute": round(60.0 * len(results) / wall_s, 2),
        "slot_seconds_per_candidate": {"median": round(statistics.median(held), 2),
                                       "mean": round(statistics.mean(held), 2),
                                       "min": round(min(held), 2), "max": round(max(held), 2)},
        "trace_statuses": statuses,
        "retried_units": sum(1 for result in results if result.attempts > 1),
        "baseline_seconds": {r.task.key: round(r.seconds, 2) for r in warmup},
        "phases_per_candidate": {name: round(entry["seconds"] / len(results), 3)
                                 for name, entry in merge([r.phases for r in results]).items()},
    }


def machine() -> dict[str, Any]:
    found = {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
             "cores": os.cpu_count(), "python": platform.python_version(),
             "torch": torch.__version__,
             "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}
    for package in ("triton", "ray", "solforge"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(0)
        found["gpus"] = torch.cuda.device_count()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--runner", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args()
    problem = str(CPU_PROBLEM) if args.device == "cpu" else GPU_PROBLEM
    settings = eval_config(args.device, Path())
    runs = []
    for workers in args.workers:
        runs.append(measure(args, workers, problem))
        print(json.dumps(runs[-1]), flush=True)
    record = {
        "what": "candidates evaluated per minute through a runner, and seconds each holds its "
                "slot (GPU-seconds per candidate on a GPU)",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "device": args.device,
        "runner": args.runner,
        "ray_address": args.ray_address,
        "slot_seconds_are": SLOT_SECONDS[args.runner],
        "problem": problem if args.device == "cuda" else str(CPU_PROBLEM.relative_to(ROOT)),
        "settings": {"baseline": settings.baseline, "smallest_workloads": settings.smallest},
        "worker_pool": os.environ.get("SOLFORGE_WORKER_POOL", "1") != "0",
        "runs": runs,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pool = "" if os.environ.get("SOLFORGE_WORKER_POOL", "1") != "0" else "-nopool"
    name = (f"throughput-{args.device}-{args.runner}{pool}-"
            f"{datetime.date.today().isoformat()}.json")
    (args.out_dir / name).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out_dir / name}")


if __name__ == "__main__":
    main()
