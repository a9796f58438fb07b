"""The evaluation harness on a GPU: the numbers issue 3 asks for, as JSON files in OUTDIR.

    python benchmarks/harness_gpu.py OUTDIR [PART ...]   parts: honest exploits sixteen ncu

- honest:   the honest Triton and CUDA C++ RMSNorms on the bundled l1/rmsnorm_llama3_1_8b:
            status, T_k, T_b (eager and torch.compile), T_SOL and the SOL score per workload;
- exploits: every fixture of the corpus that runs on a GPU (the honest ones first), with the
            status it got;
- sixteen:  a 16-workload RMSNorm problem (num_tokens 1 .. 32768) evaluated twice in separate
            runs: the wall time of each (the first times the baselines, the second finds them
            cached) and the run-to-run difference of every kernel of at least 20 us;
- ncu:      kernel-only times (the harness's profiler method) against Nsight Compute's
            gpu__time_duration.sum for three kernels, ncu run with --clock-control none
            (SOLFORGE_NCU_PROBES=name,... picks some of them).
SOLFORGE_FIXTURES=name,... limits the exploits part to those fixtures.
Each part writes OUTDIR/harness_<part>.json and is skipped when that file exists, so a run cut
short resumes where it stopped (the exploit part also resumes fixture by fixture).
harness_summary.json gathers the pass/fail of each target; it is written last.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from harness_corpus import (  # noqa: E402
    EXPLOITS,
    HONEST,
    eval_config,
    load_fixtures,
    mismatches,
    run_fixture,
)

from solforge.data.solution import load_solution  # noqa: E402
from solforge.data.trace import Status, Trace, append_traces  # noqa: E402
from solforge.harness import EvalConfig, Limits, evaluate  # noqa: E402
from solforge.harness.evaluate import EvaluationRun  # noqa: E402
from solforge.measure.timing import time_iterations  # noqa: E402
from solforge.problem import load_problem, open_problem  # noqa: E402

RMSNORM = "l1/rmsnorm_llama3_1_8b"
SIXTEEN_TOKENS = [2**k for k in range(16)]  # 1 .. 32768
REPEAT_FLOOR_MS = 0.020  # run-to-run is judged on kernels of at least 20 us
PROBE_ITERATIONS = 20
LOG_CHARS = 20000  # of an unexpected verdict, kept whole in its entry
LIMITS = Limits(setup_timeout_s=300.0, workload_timeout_s=300.0)


def honest(out: Path) -> dict:
    problem = open_problem(RMSNORM)
    config = EvalConfig(device="cuda", baseline="best", cache_dir=out / "cache", limits=LIMITS)
    results = {}
    for name in ("triton_rmsnorm", "cuda_rmsnorm"):
        solution = load_solution(HONEST / name / "solution.json", problem.name)
        started = time.perf_counter()
        traces = evaluate(problem, solution, config, progress=_log)
        append_traces(out / "traces_honest.jsonl", traces)
        results[name] = {"seconds": time.perf_counter() - started,
                         "workloads": [_summary(t) for t in traces]}
    passed = all(w["status"] == "PASSED" for r in results.values() for w in r["workloads"])
    return {"problem": RMSNORM, "solutions": results, "all_passed": passed}


def exploits(out: Path) -> dict:
    progress = out / "harness_exploits.partial.jsonl"
    done = {}
    if progress.exists():
        done = {e["name"]: e for e in map(json.loads, progress.read_text().splitlines())}
    base = EvalConfig(device="cuda", baseline="eager", cache_dir=out / "cache",
                      limits=Limits(setup_timeout_s=120.0, workload_timeout_s=120.0))
    # the honest ones first: a false positive is the first thing a change to the guards risks,
    # and a call cut short by its time limit has answered that much
    fixtures = [f for f in load_fixtures(HONEST) + load_fixtures(EXPLOITS) if f.runs_on("cuda")]
    picked = os.environ.get("SOLFORGE_FIXTURES")  # name,name: a subset (a smoke test)
    if picked:
        fixtures = [f for f in fixtures if f.name in picked.split(",")]
    for fixture in fixtures:
        if fixture.name in done:
            continue
        started = time.perf_counter()
        _keep_a_worker_ahead(fixture, base)
        traces = run_fixture(fixture, base)
        problems = mismatches(fixture, traces)
        entry = {"name": fixture.name, "expected": fixture.status.value,
                 "statuses": [t.status.value for t in traces],
                 "problems": problems,
                 # the whole verdict of an unexpected result (the worker's traceback): what
                 # the next fix starts from, where the summaries keep only its head
                 "logs": [(t.evaluation.log or "")[-LOG_CHARS:] for t in traces] if problems
                 else [],
                 "verdicts": [(t.evaluation.evidence or t.evaluation.log or "")[:300]
                              for t in traces],
                 "median_ms": [t.evaluation.timing.median_ms if t.evaluation.timing else None
                               for t in traces],
                 "seconds": time.perf_counter() - started}
        _log(f"{fixture.name}: {entry['statuses']} (expected {entry['expected']})")
        with progress.open("a") as stream:
            stream.write(json.dumps(entry) + "\n")
        done[fixture.name] = entry
    entries = [done[f.name] for f in fixtures]
    return {"fixtures": entries, "all_as_expected": all(not e["problems"] for e in entries)}


def _keep_a_worker_ahead(fixture, base: EvalConfig) -> None:
    """Two workers of this fixture's sandbox policy waiting (harness/pool.py): it takes one,
    and the next fixture of the same problem and limits finds the other already started, the
    way the optimizer's spare units work. Each worker still serves one evaluation."""
    EvaluationRun(load_problem(fixture.problem), eval_config(fixture, base)).prepare_workers(2)


def sixteen(out: Path) -> dict:
    problem = load_problem(_sixteen_problem(out / "problem16"))
    solution = load_solution(HONEST / "triton_rmsnorm" / "solution.json", problem.name)
    config = EvalConfig(device="cuda", baseline="best", cache_dir=out / "cache16", limits=LIMITS)
    runs = []
    for number in range(2):
        started = time.perf_counter()
        traces = evaluate(problem, solution, config, progress=_log)
        runs.append({"seconds": time.perf_counter() - started,
                     "workloads": [_summary(t) for t in traces]})
        append_traces(out / "traces_sixteen.jsonl", traces)
        _log(f"16-workload run {number}: {runs[-1]['seconds']:.1f} s")
    return {"runs": runs, "repeatability": _repeatability(runs),
            "warm_seconds": runs[1]["seconds"], "cold_seconds": runs[0]["seconds"],
            "warm_under_60s": runs[1]["seconds"] < 60}


def _sixteen_problem(folder: Path) -> Path:
    bundled = open_problem(RMSNORM)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(bundled.definition.to_dict(), indent=1))
    template = bundled.workloads[0].to_dict()
    lines = [json.dumps({**template, "uuid": f"tokens-{n}", "axes": {"num_tokens": n}})
             for n in SIXTEEN_TOKENS]
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _repeatability(runs: list[dict]) -> dict:
    pairs = []
    for first, second in zip(runs[0]["workloads"], runs[1]["workloads"]):
        a, b = first.get("latency_ms"), second.get("latency_ms")
        if a is None or b is None or min(a, b) < REPEAT_FLOOR_MS:
            continue
        pairs.append({"workload": first["uuid"], "first_ms": a, "second_ms": b,
                      "difference": abs(a - b) / min(a, b)})
    worst = max((p["difference"] for p in pairs), default=None)
    return {"kernels": pairs, "max_difference": worst,
            "within_3pct": worst is not None and worst <= 0.03}


def ncu(out: Path) -> dict:
    if shutil.which("ncu") is None:
        return {"skipped": "ncu is not on PATH"}
    names = os.environ.get("SOLFORGE_NCU_PROBES", ",".join(PROBES)).split(",")
    kernels = {}
    for name in names:
        ours = _our_kernel_time(name)
        theirs = _ncu_kernel_time(name)
        entry = {"solforge_median_ms": ours, **theirs}
        if "ncu_median_ms" in theirs:
            entry["difference"] = abs(ours - theirs["ncu_median_ms"]) / theirs["ncu_median_ms"]
        kernels[name] = entry
        _log(f"ncu {name}: {entry}")
    differences = [k["difference"] for k in kernels.values() if "difference" in k]
    return {"kernels": kernels,
            "within_5pct": len(differences) == len(names) and max(differences) <= 0.05}


def _our_kernel_time(name: str) -> float:
    call = PROBES[name]()
    timing = time_iterations(lambda i: call(), iterations=50, warmup=5, method="kernel")
    return timing.median_ms


def _ncu_kernel_time(name: str) -> dict:
    command = ["ncu", "--clock-control", "none", "--cache-control", "all", "--metrics",
               "gpu__time_duration.sum", "--csv", "--print-units", "base", "--nvtx",
               "--nvtx-include", "probe/",
               sys.executable, str(Path(__file__).resolve()), "--probe", name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    durations = _ncu_durations_ms(done.stdout)
    if done.returncode != 0 or len(durations) < PROBE_ITERATIONS:
        return {"ncu_error": (done.stderr or done.stdout)[-2000:], "records": len(durations)}
    per_call = len(durations) // PROBE_ITERATIONS
    sums = [sum(durations[i * per_call:(i + 1) * per_call]) for i in range(PROBE_ITERATIONS)]
    return {"ncu_median_ms": statistics.median(sums), "kernels_per_call": per_call}


def _ncu_durations_ms(text: str) -> list[float]:
    """gpu__time_duration.sum of every profiled kernel, in ms, from ncu's CSV."""
    lines = text[text.find('"ID"'):] if '"ID"' in text else ""
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3,
             "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    durations = []
    for row in csv.DictReader(io.StringIO(lines)):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            value = float(row["Metric Value"].replace(",", ""))
            durations.append(value * scale[row["Metric Unit"]])
    return durations


def _rmsnorm_probe():
    source = json.loads((HONEST / "triton_rmsnorm" / "solution.json").read_text())
    folder = Path(tempfile.mkdtemp())
    (folder / "probe_kernel.py").write_text(source["sources"][0]["content"])
    sys.path.insert(0, str(folder))
    import probe_kernel

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    weight = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    return lambda: probe_kernel.run(x, weight, 1e-5, out)


def _matmul_probe():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def _softmax_probe():
    x = torch.randn(4096, 32000, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.softmax(x, dim=-1)


PROBES = {"rmsnorm_triton_8192x4096": _rmsnorm_probe, "matmul_bf16_4096": _matmul_probe,
          "softmax_bf16_4096x32000": _softmax_probe}


def probe(name: str) -> None:
    """Run one kernel under an NVTX range "probe" for ncu to profile (warm-up outside it)."""
    call = PROBES[name]()
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("probe")
    for _ in range(PROBE_ITERATIONS):
        call()
        torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _summary(trace: Trace) -> dict:
    evaluation = trace.evaluation
    timing, baseline = evaluation.timing, evaluation.baseline
    return {
        "uuid": trace.workload["uuid"], "axes": trace.workload["axes"],
        "status": evaluation.status.value,
        "latency_ms": evaluation.performance.latency_ms if evaluation.performance else None,
        "min_ms": timing.min_ms if timing else None,
        "spread": timing.spread if timing else None,
        "sm_clock_mhz": timing.sm_clock_mhz if timing else None,
        "first_call_ms": timing.first_call_ms if timing else None,
        "t_sol_ms": evaluation.t_sol_ms, "floor_ms": evaluation.sol_floor_ms,
        "baseline": baseline.chosen if baseline else None,
        "eager_ms": baseline.eager_ms if baseline else None,
        "compile_ms": baseline.compile_ms if baseline else None,
        "sol_score": evaluation.sol_score, "notes": list(evaluation.notes),
        "speedup": evaluation.performance.speedup_factor if evaluation.performance else None,
        "message": "" if evaluation.status is Status.PASSED else evaluation.log[:500],
    }


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


PARTS = {"honest": honest, "exploits": exploits, "sixteen": sixteen, "ncu": ncu}
TARGETS = {"honest": "all_passed", "exploits": "all_as_expected", "sixteen": "warm_under_60s",
           "ncu": "within_5pct"}


def main(out: Path, parts: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in parts:
        result_file = out / f"harness_{name}.json"
        if result_file.exists():
            _log(f"{name}: {result_file} exists, skipped")
            continue
        _log(f"{name}: start")
        started = time.perf_counter()
        result = PARTS[name](out)
        result["part_seconds"] = time.perf_counter() - started
        result_file.write_text(json.dumps(result, indent=1, default=str) + "\n")
        _log(f"{name}: done in {result['part_seconds']:.0f} s")
    _write_summary(out)


def _write_summary(out: Path) -> None:
    summary = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, key in TARGETS.items():
        file = out / f"harness_{name}.json"
        summary[name] = json.loads(file.read_text()).get(key) if file.exists() else "not run"
    sixteen_file = out / "harness_sixteen.json"
    if sixteen_file.exists():
        summary["repeat_within_3pct"] = json.loads(
            sixteen_file.read_text())["repeatability"]["within_3pct"]
    (out / "harness_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    _log(f"summary: {summary}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--probe":
        probe(sys.argv[2])
    elif len(sys.argv) >= 2:
        main(Path(sys.argv[1]).resolve(), sys.argv[2:] or list(PARTS))
    else:
        sys.exit(__doc__)

