"""HGEMM on the H200: tune the kernels per shape and benchmark the dispatcher beside
torch.matmul and cuBLASLt (heuristic and autotuned), in budgeted, resumable calls.

    python benchmarks/hgemm_gpu.py OUTDIR [--deadline-s 540] [--sets grid,decode,prefill]
                                          [--stage pass|report|check] [--workers 16]
                                          [--rounds 8] [--modes offline,server]
                                          [--tune-share 0.75]

One call, within --deadline-s seconds of wall time from its start:
1. build: Triton kernels of the shortlists of every pending shape (the pass picks its order
   later, by headroom) compiled ahead in --workers processes (filling Triton's cache) while
   the CUDA wgmma extension builds in a thread; the wgmma kernel's self-test in a child
   process (a failure keeps it out);
2. environment: GPU, versions, whether nvmath-python imports;
3. probe: torch.matmul's kernel-only time for every shape still to tune, many shapes to a
   profiler session, against the roofline floor of the GPU's hardware profile (roofline.py);
4. the pass: shapes in order of headroom per estimated second (already-tuned shapes still to
   benchmark first); for each, the tuner (candidates scaled by its headroom; every mode
   validated) and then the benchmark, on the same operands and cuBLASLt plans, each result
   appended as it finishes, until --tune-share of the time left; then untuned shapes are
   benchmarked (the dispatcher runs torch.matmul there) until the deadline. A shape or a
   baseline that raises is recorded as failed and the pass goes on;
5. the dispatcher's host overhead per call, then the report: the summary of all rows so far
   (the goal numbers, per set, large cubes, decode table) and how many more calls the rest
   needs at this call's measured rate.
Files in OUTDIR (all kept, so the next call resumes from them): h200-hgemm-tune.jsonl (the
tuned table, every candidate tried), h200.jsonl (the same, candidates left out: copy it to
src/solforge/hgemm/tables/h200.jsonl to ship it),
h200-hgemm-tune.jsonl.started, h200-hgemm-probe.jsonl, h200-hgemm-bench.jsonl,
h200-hgemm-host.json, h200-hgemm-summary.json, h200-hgemm-summary.md,
h200-hgemm-environment.json, h200-hgemm-log.txt.
--stage check runs the GPU tests of tests/hgemm/test_hgemm.py instead (a few minutes, once);
--stage plan (no GPU needed) estimates what a call of --deadline-s gets through; --stage report
(no GPU needed) rewrites the summary from the files.

nvmath-python (the cuBLASLt baselines) is not on the H200 image. Carry its wheel in the
git-ignored .whl/ (nvmath_python-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl; its dependencies
cuda-bindings, cuda-core >= 0.5 and cuda-pathfinder >= 1.5.1 are on the image, and
cuda_core-1.2.2 / cuda_pathfinder-1.9.1 wheels ride along in case those are older), name .whl
in the call's `carry`, and install it with --no-deps into a --target folder on PYTHONPATH
(the device machine has no package registry). Without it the two cuBLASLt baselines are skipped
and every row says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402

from solforge.hgemm import dispatch, kernels  # noqa: E402
from solforge.hgemm.baselines import BASELINES, make_baselines  # noqa: E402
from solforge.hgemm.bench import (  # noqa: E402
    BenchSettings,
    bench_shape,
    demotions,
    finished_rows,
    load_rows,
    markdown,
    summarize,
)
from solforge.hgemm.bench import estimate_seconds as bench_estimate  # noqa: E402
from solforge.hgemm.budget import run_budgeted  # noqa: E402
from solforge.hgemm.kernels import wgmma  # noqa: E402
from solforge.hgemm.measure import CudaMeasurer  # noqa: E402
from solforge.hgemm.precompile import jobs_for, precompile  # noqa: E402
from solforge.hgemm.roofline import Roof, plan_order, roof_of_device  # noqa: E402
from solforge.hgemm.space import SM_COUNT, Shape, select_shapes, set_of  # noqa: E402
from solforge.hgemm.table import (  # noqa: E402
    TableEntry,
    append_entry,
    append_jsonl,
    environment,
    load_table,
    read_jsonl,
    write_table,
)
from solforge.hgemm.tune import (  # noqa: E402
    TuneSettings,
    probe_headrooms,
    start_counts,
    summary_line,
    tune_and_record,
)
from solforge.hgemm.tune import estimate_seconds as tune_estimate  # noqa: E402

PREFIX = "h200-hgemm"
REPORT_RESERVE_S = 20.0  # kept back from the deadline for the summary
CALL_BUDGET_S = 540.0  # one device call's command budget, for the "calls left" estimate
TUNE, BENCH = TuneSettings(), BenchSettings(rounds=8, server_gap_ms=0.5)  # run_pass's


class Run:
    """The files of one OUTDIR and a log that goes to stdout and to the log file."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.table = out / f"{PREFIX}-tune.jsonl"
        self.rows = out / f"{PREFIX}-bench.jsonl"
        self.summary = out / f"{PREFIX}-summary"
        self.environment = out / f"{PREFIX}-environment.json"
        self.probes = out / f"{PREFIX}-probe.jsonl"
        self.host = out / f"{PREFIX}-host.json"
        self.shipped = out / "h200.jsonl"  # the table as src/solforge/hgemm/tables/ ships it
        self.log_file = (out / f"{PREFIX}-log.txt").open("a")
        self.began = time.monotonic()

    def log(self, line: str) -> None:
        stamped = f"[{time.monotonic() - self.began:6.1f} s] {line}"
        print(stamped, flush=True)
        self.log_file.write(stamped + "\n")
        self.log_file.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.began


def record_environment(run: Run, built: dict) -> None:
    info = {**environment(), **built}
    try:
        import nvmath

        info["nvmath_import"] = f"ok ({nvmath.__version__})"
    except ImportError as exc:
        info["nvmath_import"] = f"missing: {exc}"
    history = json.loads(run.environment.read_text()) if run.environment.is_file() else []
    run.environment.write_text(json.dumps([*history, info], indent=1) + "\n")
    run.log(f"environment: {json.dumps(info)}")


def build_kernels(run: Run, shapes, workers: int) -> dict:
    """Triton kernels compiled ahead in processes while the wgmma extension builds."""
    outcome: dict = {}

    def build_extension() -> None:
        began = time.monotonic()
        try:
            wgmma.build()
            outcome["wgmma"] = f"built in {time.monotonic() - began:.0f} s"
        except wgmma.WgmmaBuildError as exc:
            outcome["wgmma"] = f"failed: {exc}"[:2000]

    builder = threading.Thread(target=build_extension)
    builder.start()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    jobs = jobs_for(shapes, sm_count, TUNE.shortlist)
    began = time.monotonic()
    results = precompile(jobs, workers)
    failures = [r for r in results if r.failure]
    outcome["precompile"] = (f"{len(results)} kernel sets in {time.monotonic() - began:.0f} s "
                             f"({workers} processes), {len(failures)} failed")
    for failure in failures[:5]:
        run.log(f"precompile failed: {failure.job.config.label} at {failure.job.shape.key}: "
                f"{failure.failure[:300]}")
    builder.join()
    run.log(f"build: {outcome}")
    return outcome


PROBE_SHAPES = ((200, 264, 1000), (1, 512, 512))  # ragged edges; one row
PROBE_TIMEOUT_S = 240.0


def probe_wgmma(queue) -> None:
    """In a child process: every tile, stage count, dtype and B layout of the CUDA kernel against
    a float32 product; puts the failures (empty when all pass) on `queue`."""
    from solforge.hgemm.measure import random_operands, relative_error
    from solforge.hgemm.space import Config, Shape, tolerance

    failures = []
    for dtype in ("float16", "bfloat16"):
        for layout in ("nn", "nt"):
            for size in PROBE_SHAPES:
                shape = Shape(*size, dtype, layout)
                operands = random_operands(shape, torch.device("cuda"))
                for (block_m, block_n), stages in itertools.product(wgmma.TILES,
                                                                     wgmma.STAGES):
                    config = Config.of("wgmma", BLOCK_M=block_m, BLOCK_N=block_n,
                                       NUM_STAGES=stages, GROUP_M=8)
                    error = relative_error(kernels.run(config, operands.a, operands.b),
                                           operands.reference)
                    if not error <= tolerance(shape):
                        failures.append(f"{config.label} at {shape.key}: error {error:.2e}")
    queue.put(failures)


def guard_wgmma(run: Run) -> str:
    """Run probe_wgmma in a child with a time limit; keep the kernel out of this pass if it
    fails or hangs (a hung kernel would otherwise stall the whole call)."""
    if not wgmma.available():
        return "not built"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=probe_wgmma, args=(queue,))
    child.start()
    child.join(PROBE_TIMEOUT_S)
    if child.is_alive():
        child.kill()
        verdict = f"probe still running after {PROBE_TIMEOUT_S:.0f} s (a hang?)"
    elif child.exitcode != 0:
        verdict = f"probe died with exit code {child.exitcode}"
    else:
        failures = queue.get()
        verdict = "; ".join(failures[:8]) if failures else ""
    if verdict:
        wgmma.disable(f"self-test failed: {verdict}")
        run.log(f"wgmma kept out of this pass: {verdict}")
        return f"failed: {verdict}"
    run.log("wgmma self-test: every tile, dtype and layout correct")
    return "passed"


def run_pass(run: Run, shapes, deadline_s: float, measurer, sm_count: int,
             tune_settings: TuneSettings = TUNE, bench_settings: BenchSettings = BENCH,
             tune_share: float = 1.0, roof: Roof | None = None,
             clock=time.monotonic) -> None:
    """Probe every shape still to tune (torch.matmul against the roofline), then tune and
    benchmark the shapes with the most headroom per second first, until `tune_share` of the
    time left; then benchmark untuned shapes (the dispatcher falls back to torch.matmul there)
    until the deadline. A shape that raises is recorded as failed and the pass goes on."""
    table = load_table(run.table)
    started = start_counts(run.table)
    dispatch.use_table(table, retrieval=False)
    # a row timed before its shape was tuned again, or in an earlier order, is timed again
    done_rows = {row.shape.key for row in finished_rows(load_rows(run.rows), measurer.device)}
    roof = roof or roof_of_device(measurer.device)
    headrooms = probe(run, [s for s in shapes if table.get(s) is None], measurer, roof,
                      deadline_s)

    def cost(shape) -> float:
        return tune_estimate(shape, tune_settings) + bench_estimate(shape, bench_settings)

    def tune_one(shape, operands, found) -> None:
        try:
            entry = tune_and_record(shape, run.table, table, started, measurer, tune_settings,
                                    sm_count, operands=operands, baselines=found)
        except Exception as exc:  # our bug or a library's: this shape fails, the pass goes on
            note = f"tuning failed: {type(exc).__name__}: {str(exc)[:300]}"
            entry = TableEntry(shape, None, False, {}, environment=environment(), notes=(note,))
            append_entry(run.table, entry)
            table.add(entry)
        run.log("tune  " + summary_line(entry))

    def bench_one(shape, operands, found) -> None:
        try:
            row = bench_shape(shape, measurer, bench_settings, operands=operands,
                              baselines=found)
        except Exception as exc:
            run.log(f"bench {shape.key:40s} failed: {type(exc).__name__}: {str(exc)[:300]}")
            return
        append_jsonl(run.rows, row.to_json())
        done_rows.add(shape.key)
        run.log(f"bench {shape.key:40s} dispatch {_speedup(row):>6} vs torch "
                f"({row.choice}, {row.seconds:.1f} s)")

    def process(shape, tuning: bool = True) -> None:
        try:
            operands = measurer.operands(shape)
            found = make_baselines(operands, BASELINES, tune_settings.autotune_iterations)
        except Exception as exc:
            run.log(f"shape {shape.key} could not be set up: {type(exc).__name__}: {exc}")
            return
        try:
            if tuning and table.get(shape) is None:
                tune_one(shape, operands, found)
            if shape.key not in done_rows:
                bench_one(shape, operands, found)
        finally:
            found.close()
            for note in found.notes:
                if "could not be freed" in note:
                    run.log(f"baseline at {shape.key}: {note}")

    unbenched = [s for s in shapes if table.get(s) is not None and s.key not in done_rows]
    ordered = unbenched + plan_order([s for s in shapes if table.get(s) is None], headrooms,
                                     cost)
    left = deadline_s - REPORT_RESERVE_S - run.elapsed()
    run.log(f"pass: {len(ordered)} of {len(shapes)} shapes pending, {left:.0f} s left, "
            f"{tune_share:.0%} of it for tuning")
    report = run_budgeted(ordered, process, lambda s: cost(s) if table.get(s) is None else
                          bench_estimate(s, bench_settings), tune_share * left, clock)
    rest = [s for s in ordered if s.key not in done_rows]
    if rest and tune_share < 1:
        left = deadline_s - REPORT_RESERVE_S - run.elapsed()
        bench_only = run_budgeted(rest, lambda s: process(s, tuning=False),
                                  lambda s: bench_estimate(s, bench_settings), left, clock)
        run.log(f"benchmarked untuned (torch.matmul fallback): {bench_only.done} shapes in "
                f"{bench_only.seconds:.0f} s; {bench_only.remaining} not reached")
    calls = math.ceil(report.remaining_estimate_s / CALL_BUDGET_S) if report.remaining else 0
    run.log(f"pass: {report.done} shapes tuned and benchmarked in {report.seconds:.0f} s; "
            f"{report.remaining} left, about {report.remaining_estimate_s:.0f} s at this "
            f"call's rate: {calls} more call(s) of {CALL_BUDGET_S:.0f} s")


PROBE_SHARE = 0.15  # of the deadline, at most, for probing headroom


def probe(run: Run, shapes, measurer, roof: Roof, deadline_s: float) -> dict[str, float]:
    """The headroom of each shape to tune, probed once and kept beside the table."""
    known = {r["key"]: r["headroom"] for r in read_jsonl(run.probes)[0]}
    missing = [s for s in shapes if s.key not in known]
    if missing:
        began = time.monotonic()
        found = probe_headrooms(missing, measurer, roof, budget_s=PROBE_SHARE * deadline_s)
        for key, room in found.items():
            append_jsonl(run.probes, {"key": key, "headroom": room, "roof": roof.name})
        known.update(found)
        rooms = sorted(found.values())
        middle = f"{rooms[len(rooms) // 2]:.0%}" if rooms else "n/a"
        run.log(f"probe: {len(found)} of {len(missing)} shapes in "
                f"{time.monotonic() - began:.1f} s; median torch.matmul headroom over the "
                f"{roof.name} roofline {middle}")
    return known


def measure_host_overhead(run: Run) -> None:
    """The dispatcher's host cost per call (dispatch.host_overhead) at a decode shape the table
    sends to torch.matmul and at one it sends to a kernel, if any; kept for the report."""
    table = load_table(run.table)
    dispatch.use_table(table, retrieval=False)
    picks = {"decode 1x4096x4096 bf16": Shape(1, 4096, 4096, "bfloat16", "nt")}
    kernel = next((e.shape for e in table if e.use_kernel and e.shape.flops < 2**34), None)
    if kernel is not None:
        picks[f"tuned kernel at {kernel.key}"] = kernel
    found = {}
    for name, shape in picks.items():
        try:
            operands = CudaMeasurer().operands(shape)
            found[name] = dispatch.host_overhead(operands.a, operands.b, calls=2000).to_json()
        except Exception as exc:  # a measurement, not worth the report that follows
            found[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:200]}"}
    run.host.write_text(json.dumps(found, indent=1) + "\n")
    run.log(f"host overhead per call (us): {json.dumps(found)}")


BUILD_S, PROBE_S = 40.0, 20.0  # kernel build and self-test; headroom probe (the H200, estimates)


def plan(shapes, deadline_s: float, tune_share: float,
         tune_settings: TuneSettings = TUNE, bench_settings: BenchSettings = BENCH) -> list[str]:
    """What a call of `deadline_s` should get through, from the working figures of budget.py
    (the pass itself recalibrates them as it measures): no GPU needed (--stage plan)."""
    lines, tuned, benched = [], 0.0, 0.0
    for name in ("grid", "decode", "prefill", "other"):
        part = [s for s in shapes if set_of(s) == name]
        if part:
            tune_s = sum(tune_estimate(s, tune_settings) for s in part)
            bench_s = sum(bench_estimate(s, bench_settings) for s in part)
            tuned, benched = tuned + tune_s, benched + bench_s
            lines.append(f"plan: {name}: {len(part)} shapes, tune {tune_s:.0f} s + bench "
                         f"{bench_s:.0f} s ({(tune_s + bench_s) / len(part):.2f} s a shape)")
    jobs = len(jobs_for(shapes, SM_COUNT, tune_settings.shortlist))
    left = deadline_s - REPORT_RESERVE_S - BUILD_S - PROBE_S
    share = tune_share * left / (tuned + benched) if tuned + benched else 1.0
    lines.append(f"plan: all {len(shapes)} shapes: tune {tuned:.0f} s + bench {benched:.0f} s; "
                 f"{jobs} Triton kernel sets to precompile; a call of {deadline_s:.0f} s "
                 f"tunes about {min(1.0, share):.0%} of that work (most headroom per second "
                 f"first), then benchmarks untuned shapes (torch.matmul fallback) as time "
                 f"allows")
    return lines


def _speedup(row) -> str:
    torch_ms, dispatch_ms = row.time("torch"), row.time("dispatch")
    return f"{torch_ms / dispatch_ms:.2f}x" if torch_ms and dispatch_ms else "n/a"


def write_report(run: Run) -> None:
    rows = load_rows(run.rows)
    if not rows:
        run.log("report: no benchmark rows yet")
        return
    table = load_table(run.table)
    for entry in demotions(rows, table):  # never slower: a timing the kernel lost goes back
        append_entry(run.table, entry)
        table.add(entry)
        run.log(f"report: {entry.shape.key} {entry.notes[-1]}")
    write_table(run.shipped, table)
    summary = summarize(rows, table)
    if run.host.is_file():
        summary["host_overhead_us"] = json.loads(run.host.read_text())
    run.summary.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    run.summary.with_suffix(".md").write_text(markdown(summary, rows))
    goal = summary["goal"]
    run.log(f"report: {summary['shapes']} shapes; offline kernel-only geomean "
            f"{goal['geomean_offline_kernel']}, worst {goal['worst_offline_kernel']}; "
            f"tuned vs autotuned cuBLASLt: {summary['tuned_vs_cublaslt_autotuned']}")


def run_check(run: Run) -> None:
    """The GPU tests, after the wgmma self-test (a failed kernel is kept out of them too)."""
    env = dict(os.environ)
    if guard_wgmma(run) != "passed":
        env[wgmma.DISABLE_ENV] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rA",
                           "-p", "no:cacheprovider", "tests/hgemm/test_hgemm.py"],
                          cwd=REPO, env=env, capture_output=True, text=True)
    run.log(done.stdout[-6000:] + done.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--sets", default="grid,decode,prefill")
    parser.add_argument("--stage", choices=("pass", "report", "check", "plan"), default="pass")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=BENCH.rounds,
                        help="timed calls per method in the tuner's final and in the benchmark "
                             "(the benchmark times shapes under 2^33 FLOPs at least 32 times)")
    parser.add_argument("--modes", default="offline,server", help="benchmark modes")
    parser.add_argument("--tune-share", type=float, default=0.75,
                        help="share of the pass for tuning (most headroom first); the rest "
                             "benchmarks untuned shapes, which fall back to torch.matmul")
    args = parser.parse_args()
    run = Run(args.out)
    if args.stage == "plan":
        for line in plan(select_shapes(args.sets.split(",")), args.deadline_s,
                         args.tune_share):
            run.log(line)
        return
    if args.stage == "report":  # from the files alone: any machine
        write_report(run)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU: this script runs on the H200")
    if args.stage == "check":
        run_check(run)
        return
    if args.stage == "pass":
        shapes = select_shapes(args.sets.split(","))
        table = load_table(run.table)
        dispatch.use_table(table, retrieval=False)
        rows = {row.shape.key for row in finished_rows(load_rows(run.rows), torch.device("cuda"))}
        pending = [s for s in shapes if table.get(s) is None or s.key not in rows]
        built = build_kernels(run, pending, args.workers)  # all of them: ~350 kernel sets
        built["wgmma_self_test"] = guard_wgmma(run)
        record_environment(run, built)
        sm_count = torch.cuda.get_device_properties(0).multi_processor_count
        run_pass(run, shapes, args.deadline_s, CudaMeasurer(), sm_count,
                 replace(TUNE, final_rounds=args.rounds),
                 replace(BENCH, rounds=args.rounds, modes=tuple(args.modes.split(","))),
                 args.tune_share)
        measure_host_overhead(run)
    write_report(run)


if __name__ == "__main__":
    main()
