"""The launch floor: how long a near-empty kernel takes, timed as the harness times a candidate.

    python benchmarks/launch_floor.py [-o benchmarks/results/h200-launch-floor.json]
                                      [--iterations 200] [--device cuda|cpu]

A workload whose T_SOL is a few microseconds cannot be reached by any kernel: launching one,
filling its blocks and draining them costs about a microsecond on an H200 even when it does
nothing. This measures that cost with solforge's own timer (kernel-only, from profiler records)
for kernels that do (almost) nothing, each with a cold L2 (the harness's flush before every
iteration) and a warm one:

    torch add_ 1 elem            one element through PyTorch's elementwise kernel
    triton 1 block 1 elem        a Triton kernel of one program touching one element
    triton SMS blocks 16k elem   one program per SM, 128 elements each
    torch add_ 64 MiB            a memory-bound reference: 128 MiB of traffic, ~30 us on an H200

The file records per kernel the cold and warm median and min (us) and `floor_us`, the smallest
cold median of the near-empty kernels: the floor the report's reach column uses, max(T_SOL,
floor) / T_k. `--device cpu` runs the same on the CPU with Triton's interpreter and the host
timer (the numbers mean nothing; it keeps the script working, tests/test_launch_floor.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

DEFAULT_OUT = REPO / "benchmarks" / "results" / "h200-launch-floor.json"
ELEMENTS_PER_BLOCK = 128
BIG_BYTES = 64 * 2**20


def kernels(device: str) -> dict[str, tuple[bool, Callable[[int], None]]]:
    """name -> (near-empty?, one call). Triton is imported here, after the CPU mode has asked
    for its interpreter."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one(ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(ptr + offsets, tl.load(ptr + offsets, mask=mask) + 1.0, mask=mask)

    sms = (torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda"
           else 2)
    one = torch.zeros(1, device=device)
    row = torch.zeros(sms * ELEMENTS_PER_BLOCK, device=device)
    big = torch.zeros(BIG_BYTES // 4, device=device)
    return {
        "torch add_ 1 elem": (True, lambda _: one.add_(1.0)),
        "triton 1 block 1 elem": (True, lambda _: _add_one[(1,)](one, 1, BLOCK=16)),
        f"triton {sms} blocks {row.numel()} elem": (
            True, lambda _: _add_one[(sms,)](row, row.numel(), BLOCK=ELEMENTS_PER_BLOCK)),
        "torch add_ 64 MiB": (False, lambda _: big.add_(1.0)),
    }


def measure(call: Callable[[int], None], device: str, iterations: int) -> dict[str, float]:
    from solforge.measure.timing import time_iterations

    method = "kernel" if device == "cuda" else "cpu"
    cold = time_iterations(call, iterations, warmup=10, method=method, flush_bytes=None)
    warm = time_iterations(call, iterations, warmup=10, method=method, flush_bytes=0)
    return {"cold_median_us": cold.median_ms * 1000, "cold_min_us": cold.min_ms * 1000,
            "warm_median_us": warm.median_ms * 1000, "warm_min_us": warm.min_ms * 1000,
            "cold_spread": cold.spread}


def launch_floor(device: str, iterations: int) -> dict[str, Any]:
    from script_common import log, recorded_environment

    measured: dict[str, Any] = {}
    floors = []
    for name, (near_empty, call) in kernels(device).items():
        numbers = measure(call, device, iterations)
        measured[name] = {"near_empty": near_empty, **numbers}
        if near_empty:
            floors.append(numbers["cold_median_us"])
        log(f"{name}: cold median {numbers['cold_median_us']:.3f} us, min "
            f"{numbers['cold_min_us']:.3f}; warm median {numbers['warm_median_us']:.3f} us")
    return {"what": "kernel-only time of near-empty kernels, solforge's timer, cold and warm L2",
            "date": datetime.date.today().isoformat(), "device": device,
            "timing": "kernel" if device == "cuda" else "cpu", "iterations": iterations,
            "environment": recorded_environment(device),
            "floor_us": min(floors),
            "kernels": measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    if args.iterations < 1:
        sys.exit("launch_floor.py: --iterations must be at least 1")
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("launch_floor.py: no CUDA GPU: run on the H200, or pass --device cpu")
    result = launch_floor(args.device, args.iterations)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"launch floor {result['floor_us']:.3f} us -> {args.out}")


if __name__ == "__main__":
    main()
