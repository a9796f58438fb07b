"""Where a Triton candidate's first calls spend their time on a GPU (issue 13).

    python benchmarks/first_call_profile.py OUT.json [--problem l1/rmsnorm_llama3_1_8b]
        [--candidates 2] [--top 40] [--cold]

A candidate's first call of each workload runs under the GPU's shared lock (device_lock.py), so
whatever it spends there is time the other units cannot time their kernels in. The optimizer
compiles each Triton candidate's kernels ahead and its worker computes Triton's cache keys before
the candidate exists; this measures what is left. For each of the first `--candidates` template
candidates of the problem: its kernels compiled ahead into a Triton cache (forge/capture.py, as
the optimizer does), then a fresh interpreter as a worker has it (torch imported, CUDA up,
Triton's keys computed, its first launch made unless `--cold`, the candidate imported, that
cache its Triton cache) calls it twice per workload, each call synchronised, the first ones
under cProfile. Before those calls it looks the kernels up as the capture does, on meta
tensors (`keys_meta`), to compare the cache keys with the real calls' (`keys_real`). Records
per workload the first and second call's milliseconds, and the profile's top functions by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import log, recorded_environment  # noqa: E402


def candidates(address: str, count: int) -> list[dict[str, Any]]:
    """The first `count` valid template candidates of the problem, as solution dicts."""
    from solforge.forge.templates import templates_for
    from solforge.problem.suite import open_problem

    problem = open_problem(address)
    found = []
    for template in templates_for(problem.definition):
        for params in template.configurations():
            if len(found) < count and template.invalid_reason(params, problem) is None:
                found.append(template.render(params, problem))
    return found


def compiled_ahead(solution: dict[str, Any], address: str, cache: Path) -> int:
    """The candidate's kernels compiled for every workload its worker would time, into `cache`."""
    import shutil

    import torch

    from solforge.data.solution import parse_solution
    from solforge.forge.capture import compile_ahead
    from solforge.harness.evaluate import EvalConfig, select_workloads
    from solforge.problem.suite import open_problem

    problem = open_problem(address)
    workloads = select_workloads(problem, EvalConfig(), torch.device("cuda"))

    def keep(folder: Path) -> None:
        shutil.copytree(folder, cache, dirs_exist_ok=True)

    return compile_ahead(parse_solution(solution), problem, workloads, keep)


def child(request_path: str) -> None:
    """The worker's side: everything before the first call done, then the calls profiled."""
    request = json.loads(Path(request_path).read_text())
    began = time.perf_counter()
    import torch

    from solforge.data.solution import parse_solution
    from solforge.forge.capture import workload_arguments
    from solforge.harness import jit_keys
    from solforge.harness.evaluate import EvalConfig, select_workloads
    from solforge.problem.suite import open_problem

    device = torch.device("cuda")
    torch.ones(1, device=device).add_(1)
    torch.cuda.synchronize()
    ready = {"imports_and_cuda_s": time.perf_counter() - began}
    mark = time.perf_counter()
    ready["jit_keys"] = jit_keys.compute()
    ready["jit_keys_s"] = time.perf_counter() - mark
    if request["warm"]:  # the worker's own first launch (harness/triton_warm.py)
        from solforge.harness import triton_warm

        mark = time.perf_counter()
        ready["triton_launch"] = triton_warm.launch_once(device)
        ready["triton_launch_s"] = time.perf_counter() - mark
    problem = open_problem(request["problem"])
    solution = parse_solution(request["solution"])
    folder = Path(request["folder"])
    solution.write_sources(folder)
    sys.path.insert(0, str(folder))
    mark = time.perf_counter()
    import importlib.util

    spec = importlib.util.spec_from_file_location("candidate", folder / solution.entry_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, solution.entry_function)
    ready["import_s"] = time.perf_counter() - mark
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    keys = _recorded_keys()
    ahead = _meta_lookups(solution, problem, select_workloads(problem, EvalConfig(), device))
    keys_ahead, keys[:] = list(keys), []
    before = _cache_entries(cache)
    profile = cProfile.Profile()
    rows = []
    for workload in select_workloads(problem, EvalConfig(), device):
        inputs = workload_arguments(solution, problem, workload, "cuda")
        torch.cuda.synchronize()
        mark = time.perf_counter()
        profile.enable()
        function(*inputs)
        torch.cuda.synchronize()
        profile.disable()
        first = time.perf_counter() - mark
        mark = time.perf_counter()
        function(*inputs)
        torch.cuda.synchronize()
        second = time.perf_counter() - mark
        rows.append({"workload": workload.uuid, "first_ms": first * 1e3,
                     "second_ms": second * 1e3})
        del inputs
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(request["top"])
    own = io.StringIO()
    pstats.Stats(profile, stream=own).sort_stats("tottime").print_stats(request["top"])
    after = _cache_entries(cache)
    ready["environment"] = {k: v for k, v in os.environ.items()
                            if k.startswith(("TRITON", "LLVM", "MLIR", "PTXAS", "CUDA"))}
    Path(request["result"]).write_text(json.dumps(
        {"ready": ready, "calls": rows, "cache_before": before, "meta_lookups_s": ahead,
         "keys_meta": keys_ahead, "keys_real": keys,
         "cache_added": {k: v for k, v in after.items() if k not in before},
         "profile_cumulative": text.getvalue(),
         "profile_own": own.getvalue()}, indent=1))


def _recorded_keys() -> list[dict[str, Any]]:
    """From now on, the parts of every Triton cache key this process computes."""
    from triton.compiler import compiler

    seen: list[dict[str, Any]] = []
    original = compiler.get_cache_key

    def recording(src, backend, options, env_vars):
        seen.append({"name": src.name, "src": src.hash(), "backend": backend.hash(),
                     "options": options.hash(), "env": sorted(env_vars.items()),
                     "option_values": {k: repr(v) for k, v in vars(options).items()}})
        return original(src, backend, options, env_vars)

    compiler.get_cache_key = recording
    return seen


def _meta_lookups(solution: Any, problem: Any, workloads: list[Any]) -> list[float]:
    """The capture's own lookups (forge/capture.py, on meta tensors) in this process's cache,
    before any real call: seconds per workload."""
    from solforge.forge import capture

    seconds = []
    for workload in workloads:
        began = time.perf_counter()
        record = capture._Capture(capture._gpu_target("sm_90a"), 0)
        with capture._loaded_entry_point(solution) as function, record.installed():
            function(*capture.workload_arguments(solution, problem, workload, "meta"))
        seconds.append(time.perf_counter() - began)
    return seconds


def _cache_entries(cache: Path) -> dict[str, Any]:
    """Each kernel in a Triton cache folder: its hash folder and what its metadata says
    (a kernel added by a first call is one the compile ahead did not provide)."""
    found = {}
    for meta in sorted(cache.glob("*/*.json")):
        if meta.name.startswith("__grp__"):
            continue
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "target" in data:
            found[f"{meta.parent.name}/{meta.name}"] = data
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--problem", default="l1/rmsnorm_llama3_1_8b")
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--cold", action="store_true",
                        help="leave out the worker's own first Triton launch (triton_warm.py)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("first_call_profile.py needs a CUDA GPU")
    record: dict[str, Any] = {"what": "a Triton candidate's first calls, per workload, after "
                              "its kernels were compiled ahead (benchmarks/first_call_profile.py)",
                              "environment": recorded_environment("cuda"), "problem": args.problem,
                              "candidates": []}
    for solution in candidates(args.problem, args.candidates):
        with tempfile.TemporaryDirectory(prefix="first-call-") as scratch:
            root = Path(scratch)
            mark = time.perf_counter()
            compiled = compiled_ahead(solution, args.problem, root / "triton")
            ahead_s = time.perf_counter() - mark
            request = {"problem": args.problem, "solution": solution, "top": args.top,
                       "warm": not args.cold,
                       "folder": str(root / "solution"), "result": str(root / "result.json")}
            (root / "request.json").write_text(json.dumps(request))
            env = {**os.environ, "TRITON_CACHE_DIR": str(root / "triton")}
            mark = time.perf_counter()
            subprocess.run([sys.executable, __file__, "x", "--child", str(root / "request.json")],
                           env=env, check=True)
            result = json.loads((root / "result.json").read_text())
            result.update(name=solution["name"], workloads_compiled_ahead=compiled,
                          compile_ahead_s=ahead_s, child_s=time.perf_counter() - mark)
            record["candidates"].append(result)
            firsts = [row["first_ms"] for row in result["calls"]]
            log(f"{solution['name']}: first calls {', '.join(f'{v:.1f}' for v in firsts)} ms; "
                f"ready {result['ready']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
