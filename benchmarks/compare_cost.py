"""What one output comparison costs the driver, alone on the device, per workload.

    python benchmarks/compare_cost.py [-o OUT.json] [--device cuda|cpu] [--repeats 20]
        [PROBLEM ...]

The phase table charges `compare` with the driver's checks of a candidate's outputs against the
reference (harness/compare.py: in float64, every reduction read back in one transfer): 0.80 s
of each optimizer candidate with 3 units on an H100 (2026-12-05), for 6 workloads x (5 rounds
+ 8 chosen timed calls) = 78 comparisons, about 10 ms each. This times `compare_outputs` on
each workload's real output shapes and dtypes with nothing else on the device, in ms per
comparison (median of `--repeats`), and counts the device kernels one comparison launches:
whether the 10 ms are the comparison's own or the sharing's (other units' work on the GPU
between its kernels). On a GPU each workload is timed twice: as the harness compares (float
outputs in compare_kernel.py's one pass) and, as `torch_path`, with that pass turned off (the
float64 torch kernels it replaced).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import checked_device, log, recorded_environment, write_record  # noqa: E402

from solforge.data.dtypes import storage_shape  # noqa: E402
from solforge.harness import compare, compare_kernel  # noqa: E402
from solforge.harness.compare import compare_outputs  # noqa: E402
from solforge.problem import open_problem  # noqa: E402
from solforge.problem.problem import Problem, tensor_shape  # noqa: E402

PROBLEMS = ("l1/rmsnorm_llama3_1_8b", "l1/layernorm_whisper_large_v3", "l1/swiglu_llama3_1_8b",
            "l1/rope_cos_sin_cache_qwen3_32b")  # the throughput search's


def outputs_for(problem: Problem, workload: Any, device: torch.device,
                seed: int) -> tuple[list[torch.Tensor], dict[str, tuple[int, ...] | None]]:
    """Random outputs of the workload's shapes and dtypes, and the shapes compare checks."""
    axes = problem.axes(workload)
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors, shapes = [], {}
    for name, spec in problem.definition.outputs.items():
        shape = tensor_shape(spec, axes)
        shapes[name] = shape
        dtype = spec.dtype.torch_dtype
        stored = storage_shape(shape or (), spec.dtype)
        if dtype.is_floating_point:
            value = torch.randn(stored, generator=generator, device=device).to(dtype)
        else:
            value = torch.randint(0, 100, stored, generator=generator, device=device).to(dtype)
        tensors.append(value)
    return tensors, shapes


def kernels_per_compare(run: Any, device: torch.device) -> int | None:
    """Device kernels one comparison launches (None on the CPU)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type.name == "CUDA")


def compare_once(problem: Problem, outputs: list[torch.Tensor], reference: list[torch.Tensor],
                 shapes: dict[str, tuple[int, ...] | None], tolerance: Any) -> None:
    verdict = compare_outputs(outputs, reference, problem.definition, shapes, tolerance)
    if not verdict.passed:
        raise SystemExit(f"{problem.name}: an identical output failed: {verdict}")


def measure(problem: Problem, device: torch.device, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for workload in problem.workloads:
        reference, shapes = outputs_for(problem, workload, device, seed=1)
        outputs = [t.clone() for t in reference]  # identical: the comparison passes, all of it

        run = functools.partial(compare_once, problem, outputs, reference, shapes,
                                workload.tolerance)
        elements = sum(t.numel() for t in reference)
        row = {"problem": problem.name, "workload": workload.uuid, "output_elements": elements,
               "output_bytes": sum(t.numel() * t.element_size() for t in reference),
               **timed(run, device, repeats)}
        if device.type == "cuda":  # the same comparison without compare_kernel.py's pass
            with mock.patch.object(compare_kernel, "eligible", lambda out, ref: False):
                row["torch_path"] = timed(run, device, repeats)
        rows.append(row)
        plain = row.get("torch_path", {}).get("ms_median")
        log(f"{problem.name} {elements:>11,} elements: {row['ms_median']:.3f} ms"
            + (f" (float64 torch path {plain:.3f} ms)" if plain else ""))
    return rows


def timed(run: Any, device: torch.device, repeats: int) -> dict[str, Any]:
    """Median and least ms of `repeats` comparisons after 3 untimed, and the kernels of one."""
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1e3)
    return {"ms_median": statistics.median(times), "ms_min": min(times),
            "kernels": kernels_per_compare(run, device)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("-o", "--output", type=Path, default=None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    device = checked_device(args.device, args.repeats)
    rows = [row for address in args.problems
            for row in measure(open_problem(address), device, args.repeats)]
    record = {"what": "ms per output comparison (harness/compare.py), alone on the device",
              "environment": recorded_environment(args.device), "repeats": args.repeats,
              "one_pass_trusted": device.type == "cuda" and compare.one_pass_trusted(device),
              "rows": rows,
              "ms_median_over_workloads": statistics.median(r["ms_median"] for r in rows)}
    write_record(record, args.output)


if __name__ == "__main__":
    main()
