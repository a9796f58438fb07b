"""What a fresh process pays before its first kernel-only timing: the steps a harness worker
takes at its start, each timed in a new interpreter (so every first use is a first use).

    python benchmarks/profiler_start.py [-o OUT.json] [--repeats N]

The GPU phase table shows a worker's start at about 9 s on the H200, 4 of them in its first
profiler session (`start_profiler`). This splits that step: `import torch.profiler`, CUPTI's
start with CUDA activities alone and with CPU ones too, and a second session in the same
process (what every later timed loop pays).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import recorded_environment  # noqa: E402

STEPS = r"""
import json, sys, time
t = [("start", time.perf_counter())]
import torch
t.append(("import_torch", time.perf_counter()))
torch.randn(1 << 16, device="cuda").sum(); torch.cuda.synchronize()
t.append(("cuda_context_and_first_kernel", time.perf_counter()))
from torch.profiler import ProfilerActivity, profile
t.append(("import_torch_profiler", time.perf_counter()))
kinds = {"cuda": [ProfilerActivity.CUDA], "cpu_cuda": [ProfilerActivity.CPU, ProfilerActivity.CUDA]}
for n, label in enumerate(sys.argv[1:], 1):
    with profile(activities=kinds[label]) as prof:
        torch.randn(1 << 16, device="cuda").sum(); torch.cuda.synchronize()
    prof.profiler.kineto_results.events()
    t.append((f"profiler_session_{n}_{label}", time.perf_counter()))
print(json.dumps({b[0]: round(b[1] - a[1], 4) for a, b in zip(t, t[1:])}))
"""

ORDERS = {"cpu_cuda first": ["cpu_cuda", "cpu_cuda"], "cuda first": ["cuda", "cpu_cuda"]}


def one_process(order: list[str]) -> dict[str, float]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", STEPS, *order], capture_output=True, text=True,
                          timeout=300, check=True)
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    return {**steps, "process_wall": round(time.perf_counter() - began, 4)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    runs = {name: [one_process(order) for _ in range(args.repeats)]
            for name, order in ORDERS.items()}
    result = {"what": "a fresh process's steps before its first kernel-only timing (seconds)",
              "date": time.strftime("%Y-%m-%d"), "environment": recorded_environment("cuda"),
              "orders": {name: order for name, order in ORDERS.items()}, "runs": runs}
    text = json.dumps(result, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    for name, timed in runs.items():
        for steps in timed:
            print(name, json.dumps(steps))


if __name__ == "__main__":
    main()
