"""Where the timer's share of a timed loop goes, per call, on the GPU.

    python benchmarks/timer_cost.py [-o OUT.json] [--repeats 5]

The phase table charges `loop_timer` (0.62 s of each optimizer candidate on the H200,
2026-12-05) with everything of a timed loop that is not the worker's own work: L2 flushes,
synchronizations, the profiler's sessions and records, the clock samples. This splits it on one
small kernel (a 4 MB in-place multiply), each part timed alone, in ms per call:
- `flush_sync`: the flush (write and read twice the L2) and the two synchronizations, no
  profiler;
- `clock_sample`: one NVML read of the SM and memory clocks (the timer takes one per call);
- `session`: an empty profiler session with CPU and CUDA activities (one per chunk);
- `kernel_loop` / `events_loop`: `time_iterations` whole, 10 warm-ups and 20 timed calls
  ("kernel": the profiler's records; "events": CUDA events), divided by its 30 calls;
- `kernel_loop_adaptive`: the same with the stopping rule, up to 50 timed calls in chunks.
Medians over `--repeats`. With the harness's guard check and hand-over added, these are the
`loop_*` phases of a candidate's worker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import recorded_environment  # noqa: E402

from solforge.measure import timing  # noqa: E402
from solforge.measure.clocks import ClockSampler, clock_reader  # noqa: E402

WARMUP, TIMED = 10, 20


def per_call_ms(step: Callable[[], None], calls: int) -> float:
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) * 1e3 / calls


def parts(data: torch.Tensor) -> dict[str, float]:
    """One measurement of every part, in ms per call."""
    from torch.profiler import ProfilerActivity, profile

    device = data.device
    flush = timing.l2_flush_buffer(torch.cuda.get_device_properties(device).L2_cache_size, device)

    def flush_sync() -> None:
        timing._flush(flush, 1)
        torch.cuda.synchronize()
        data.mul_(1.0)
        torch.cuda.synchronize()

    def session() -> None:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            pass

    sampler = ClockSampler(clock_reader(device))

    def loop(method: str, stop: timing.StopRule | None, cap: int) -> float:
        began = time.perf_counter()
        result = timing.time_iterations(lambda i: data.mul_(1.0), cap, WARMUP, method=method,
                                        stop=stop)
        return (time.perf_counter() - began) * 1e3 / (WARMUP + len(result.times_ms))

    return {
        "flush_sync": per_call_ms(flush_sync, 30),
        "clock_sample": per_call_ms(lambda: sampler.sample(force=True), 30),
        "session": per_call_ms(session, 5),
        "kernel_loop": loop("kernel", None, TIMED),
        "events_loop": loop("events", None, TIMED),
        "kernel_loop_adaptive": loop("kernel", timing.StopRule(), 50),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("timer-cost.json"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("timer_cost.py needs a CUDA GPU")
    data = torch.randn(1 << 20, device="cuda")
    parts(data)  # the first of everything: CUPTI's start, NVML's, the kernels' load
    runs = [parts(data) for _ in range(args.repeats)]
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    result = {"environment": recorded_environment("cuda"), "date": time.strftime("%Y-%m-%d"),
              "unit": "ms per call", "repeats": args.repeats, "median": medians, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, value in medians.items():
        print(f"{name:22s} {value:8.3f} ms")


if __name__ == "__main__":
    main()
