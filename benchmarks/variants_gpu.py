"""Time kernel variants against a problem's shipped solution, eager and torch.compile, before
one of them replaces the shipped kernel (issue 14: every shipped solution faster than
torch.compile).

    python benchmarks/variants_gpu.py [-o OUT.json] [--largest 2] [--smallest 0]
                                      [--device cuda|cpu] [PROBLEM=MODULE ...]

MODULE is a file of benchmarks/variants/ whose VARIANTS maps a name to a destination-passing
`run(*inputs, *outputs)`; without arguments the default pairs below. On the `--largest` N
workloads of each problem (by input size), and the `--smallest` N, every variant is first
checked against the reference with the workload's tolerance (one that fails or raises is
recorded as failed, not timed),
then eager, torch.compile, the shipped solutions and the variants are timed kernel-only with a
cold L2 (solforge's timer and stop rule), and the medians and each one's ratio to
torch.compile written to OUT.json (default benchmarks/results/h200-variants.json) with the
environment. `--device cpu` runs one smallest workload under Triton's interpreter with host
timing: the numbers mean nothing, it keeps the script working without a GPU
(tests/benchmarks/test_variants.py).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "benchmarks" / "variants"))

import torch  # noqa: E402
from script_common import log, recorded_environment  # noqa: E402

from solforge.bench.plan import find_solutions, solution_folders  # noqa: E402
from solforge.harness.compare import compare_outputs  # noqa: E402
from solforge.measure.timing import StopRule, time_iterations  # noqa: E402
from solforge.problem.inputs import make_inputs  # noqa: E402
from solforge.problem.outputs import as_output_list  # noqa: E402
from solforge.problem.problem import Problem, tensor_shape  # noqa: E402
from solforge.problem.reference import load_reference_module  # noqa: E402
from solforge.problem.suite import open_problem  # noqa: E402

DEFAULT = (
    "quant/fp8_quant_per_token_llama3_1_8b_down=fp8_quant_per_token",
    "quant/fp8_quant_group128_deepseek_v3=fp8_quant_group128",
    "l1/swiglu_llama3_1_8b=swiglu",
    "l1/swiglu_qwen3_32b=swiglu",
    "l1/swiglu_deepseek_v3_experts=swiglu",
    "l2/swiglu_mlp_llama3_1_8b=swiglu_mlp",
)
OUT = REPO / "benchmarks" / "results" / "h200-variants.json"


def solution_runs(problem: Problem, folder: Path) -> dict[str, Callable]:
    """Each shipped Python/Triton solution's entry point, imported from a scratch folder."""
    runs = {}
    found = find_solutions(solution_folders((), bundled=True)).by_definition
    for solution in found.get(problem.name, ()):
        if solution.is_cpp or not solution.destination_passing_style:
            continue
        where = folder / solution.name
        where.mkdir(parents=True, exist_ok=True)
        solution.write_sources(where)
        module = _import(where / solution.entry_file)
        runs[f"shipped:{solution.name}"] = getattr(module, solution.entry_function)
    return runs


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"shipped_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_ms(call: Callable[[], Any], device: str) -> dict[str, Any]:
    """Kernel-only with a cold L2 on the GPU, until the median is known to 1% (30-200 calls);
    three host-timed calls on the CPU."""
    if device == "cuda":
        timing = time_iterations(lambda _: call(), iterations=200, warmup=5, method="kernel",
                                 stop=StopRule(min_iterations=30))
    else:
        timing = time_iterations(lambda _: call(), iterations=3, warmup=0, method="cpu")
    return {"median_ms": timing.median_ms, "spread": round(timing.spread, 4),
            "iterations": len(timing.times_ms)}


def workload_rows(problem: Problem, variants: dict[str, Callable], workload, device: str,
                  scratch: Path) -> dict[str, Any]:
    module = load_reference_module(problem.definition, problem.root / "definition.json")
    inputs = list(make_inputs(problem, workload, device, seed=1).values())
    axes = problem.axes(workload)
    shapes = {n: tensor_shape(s, axes) for n, s in problem.definition.outputs.items()}
    with torch.no_grad():
        expected = as_output_list(module.run(*inputs), problem.definition)
    row: dict[str, Any] = {"workload": workload.uuid, "axes": axes, "times": {}, "failed": {}}
    candidates = {**solution_runs(problem, scratch), **variants}
    runs: dict[str, Callable[[], Any]] = {"eager": lambda: module.run(*inputs)}
    if device == "cuda":
        compiled = torch.compile(module.run)
        runs["compile"] = lambda: compiled(*inputs)
    for name, run in candidates.items():
        outputs = [torch.empty_like(e) for e in expected]
        try:
            run(*inputs, *outputs)
        except Exception as exc:  # a variant for some sizes only: recorded, not timed
            row["failed"][name] = f"{type(exc).__name__}: {exc}"
            continue
        verdict = compare_outputs(outputs, expected, problem.definition, shapes,
                                  workload.tolerance)
        if verdict.passed:
            runs[name] = (lambda r, o: lambda: r(*inputs, *o))(run, outputs)
        else:
            row["failed"][name] = verdict.message or verdict.status.value
    with torch.no_grad():
        for name, call in runs.items():
            row["times"][name] = time_ms(call, device)
            log(f"{problem.name} {workload.uuid[:8]} {name}: "
                f"{row['times'][name]['median_ms'] * 1e3:.1f} us")
    if "compile" in row["times"]:
        base = row["times"]["compile"]["median_ms"]
        for entry in row["times"].values():
            entry["speedup_vs_compile"] = round(base / entry["median_ms"], 4)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="*", default=list(DEFAULT))
    parser.add_argument("-o", "--out", type=Path, default=OUT)
    parser.add_argument("--largest", type=int, default=2)
    parser.add_argument("--smallest", type=int, default=0,
                        help="also the N smallest workloads (decode sizes)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    record: dict[str, Any] = {"date": datetime.date.today().isoformat(), "problems": {},
                              "environment": recorded_environment(args.device)}
    with tempfile.TemporaryDirectory() as scratch:
        for pair in args.pairs:
            address, _, module_name = pair.partition("=")
            problem = open_problem(address)
            variants = importlib.import_module(module_name).VARIANTS
            ordered = sorted(problem.workloads, key=problem.input_elements)
            picked = {*range(len(ordered) - args.largest, len(ordered)),
                      *range(min(args.smallest, len(ordered)))}
            chosen = ([w for i, w in enumerate(ordered) if i in picked] if args.device == "cuda"
                      else ordered[:1])
            record["problems"][address] = [
                workload_rows(problem, variants, w, args.device, Path(scratch))
                for w in chosen]
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
