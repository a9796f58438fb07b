"""Issue 5 on the H200: the bundled suite and its shipped solutions through `solforge bench`,
resumable across calls, then the recorded tables and the HTML report.

    python benchmarks/suite_gpu.py OUTDIR [TARGET ...] [--deadline-s 540] [--device cuda|cpu]
                                   [--name h200] [--launch-floor FILE] [--chunk N] [--per-gpu N]

TARGETs are what `solforge bench` takes (default: `all`). Problems are benched --chunk at a
time (on a GPU all of them in one `bench` run), in suite order, into OUTDIR/suite.db. Each run
gets the time left less a margin as its deadline: it starts no unit that could not end before
it, by the longest of the recent units, stops a unit still running at it (its partial work
lost), and leaves the rest for the next call; a chunk starts only while the time left exceeds
the longest chunk so far plus the margin. So a call ends before the device tool's limit. The
store skips what an earlier call measured, so the same command, repeated, finishes the suite.
Then, from everything the store holds:

    OUTDIR/NAME-suite.json   environment; per problem T_SOL, eager and torch.compile (medians
                             over the workloads, ms), every shipped solution (workloads passed,
                             mean S, median T_SOL / T_k, speedups over eager and compile); per
                             tier the medians of `solforge bench`; the goal of the shipped
                             solutions: median T_SOL / T_k >= 0.80 over the problems they cover,
                             every one faster than torch.compile; beside S the
                             reach max(T_SOL, launch floor) / T_k and the launch-bound workloads
                             (T_SOL under the floor of --launch-floor, a launch_floor.py file)
    OUTDIR/NAME-goals.json   suite_problems and shipped {problems, median_fraction_of_sol,
                             faster_than_compile}, merged with forge_gpu.py's keys
    OUTDIR/NAME-suite.md     the same as tables
    OUTDIR/NAME-suite-report.html   `solforge report` of the store
    OUTDIR/NAME-suite-phases.json   the call's units' phases, summed (also in the log, with a
                             line per unit that ended: its seconds)
    OUTDIR/NAME-suite-calls.jsonl   a line per call that benched: its bench seconds, traces
                             measured, units left, seconds spent timing baselines
    OUTDIR/NAME-suite-time.json     the calls summed: the suite's bench minutes, measured, not
                             extrapolated, once no unit is left (`complete`); with
                             `from_an_empty_store` and `baseline_seconds` near 0 (the baselines
                             imported beforehand) that is issue 13's `suite_warm_minutes`
NAME is --name: h200 by default on the GPU, cpu in CPU mode.

`--device cpu` runs the CPU mode (smallest workloads, no scores): what
tests/benchmarks/test_benchmark_scripts.py runs to keep this script working without a GPU.
`--tables-only` benches nothing and needs no GPU: it writes the files again from OUTDIR/suite.db
as it stands (after traces were deleted from it to be measured again), keeping the environment
the earlier machine recorded in NAME-suite.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from goals_file import goals_path, median_fraction_of_sol, merge_goals  # noqa: E402
from script_common import fmt, log, no_time_for, recorded_environment  # noqa: E402

from solforge.bench.plan import find_solutions, plan_problems, solution_folders  # noqa: E402
from solforge.bench.results import Measured, ProblemResults, read_results  # noqa: E402
from solforge.bench.run import (  # noqa: E402
    BenchConfig,
    BenchOutcome,
    eval_config,
    plan_units,
    run_bench,
)
from solforge.bench.summary import (  # noqa: E402
    compile_line,
    solution_line,
    tier_lines,
)
from solforge.defaults import resolve_run  # noqa: E402
from solforge.errors import SolforgeError  # noqa: E402
from solforge.harness.phases import format_table, merge  # noqa: E402
from solforge.harness.protocol import REFERENCE_COMPILE, REFERENCE_EAGER  # noqa: E402
from solforge.report import gather, render  # noqa: E402
from solforge.report.tables import launch_bound, launch_floor_ms, reach  # noqa: E402
from solforge.score import summarize  # noqa: E402
from solforge.storage import open_store  # noqa: E402
from solforge.store.schema import Run  # noqa: E402

MARGIN_S = 30.0  # kept free at the end of a call for the tables and the report
GOAL_FRACTION = 0.80  # median T_SOL / T_k of the shipped solutions
GOAL_SHIPPED = 30  # problems with a shipped solution, every one faster than torch.compile
RESULTS = REPO / "benchmarks" / "results"
# launch_floor.py's file once measured, else the review measurement of 2026-12-01
LAUNCH_FLOORS = (RESULTS / "h200-launch-floor.json", RESULTS / "h200-launch-floor-2026-12-01.json")


@dataclass(frozen=True)
class Call:
    out: Path
    targets: list[str]
    deadline_s: float
    device: str
    name: str  # the files' prefix
    floor_ms: float | None = None  # the launch floor; None on the CPU
    chunk: int = 1  # problems per `solforge bench` run; 0: all in one
    per_gpu: int = 1  # units sharing the GPU (harness/device_lock.py)


class UnitLog:
    """The bench's reporter here: a line per unit that ends (its seconds and slot) or comes
    from the baseline store, so a call's log says which units took its time."""

    def start(self, total: int, skipped: int) -> None:
        return None

    def working_on(self, text: str) -> None:
        if ": done on " in text or "from the baseline store" in text:
            log(f"    {text}")

    def saved(self, trace: Any) -> None:
        return None


def save_phases(call: Call, outcomes: list[BenchOutcome]) -> None:
    """NAME-suite-phases.json: this call's units' phase table, summed (harness/phases.py), the
    per-phase account of where a call's bench time went."""
    table = merge([o.phases for o in outcomes])
    (call.out / f"{call.name}-suite-phases.json").write_text(json.dumps(table, indent=1) + "\n")
    if table:
        log("phases of this call's units:\n" + format_table(table))


def baseline_of(call: Call) -> str:
    """The T_b rule of `call.device`, asked without touching a device: --tables-only runs
    where the measuring GPU is not."""
    return resolve_run(call.device, remote=True).baseline


def bench_until_deadline(call: Call, started: float) -> list[BenchOutcome]:
    """Bench the planned problems --chunk at a time while the time left allows the next chunk:
    one `solforge bench` run over several problems overlaps one problem's worker starts and
    compiles with another's timing (the throughput sample: 4 problems at about 37 s each,
    cold), and its deadline keeps it from starting a unit it could not finish."""
    store = open_store(f"sqlite:///{call.out / 'suite.db'}")
    found = find_solutions(solution_folders([], bundled=True))
    problems = plan_problems(call.targets, found, call.device)
    config = BenchConfig(device=call.device, baseline=baseline_of(call), per_gpu=call.per_gpu,
                         command=f"benchmarks/suite_gpu.py {' '.join(call.targets)}")
    outcomes: list[BenchOutcome] = []
    longest = 0.0
    size = call.chunk or max(1, len(problems))
    for first in range(0, len(problems), size):
        chunk = problems[first:first + size]
        addresses = ", ".join(p.address for p in chunk)
        left = call.deadline_s - (time.monotonic() - started)
        if no_time_for(addresses, left, longest, MARGIN_S):
            break
        begun = time.monotonic()
        outcome = run_bench(chunk, store, replace(config, deadline_s=max(1.0, left - MARGIN_S)),
                            UnitLog())
        longest = max(longest, time.monotonic() - begun)
        outcomes.append(outcome)
        numbers = (f"{first + 1}" if len(chunk) == 1
                   else f"{first + 1}-{first + len(chunk)}")
        log(f"[{numbers}/{len(problems)}] {addresses}: {outcome.measured} measured, "
            f"{outcome.skipped} already stored, {time.monotonic() - begun:.1f} s"
            + (f"; {outcome.left} units left for the next call" if outcome.left else "")
            + "".join(f"\n    could not run: {failure}" for failure in outcome.failures))
    return outcomes


def planned_units(call: Call, store: Any, hardware: str) -> tuple[list, list, int]:
    """`bench`'s plan of the targets against the store, run nothing: the problems' rows, the
    units with workloads left (a failed unit's traces count as done) and the count skipped."""
    found = find_solutions(solution_folders([], bundled=True))
    problems = plan_problems(call.targets, found, call.device)
    config = BenchConfig(device=call.device, baseline=baseline_of(call))
    return plan_units(problems, store, eval_config(config, call.device),
                      torch.device(call.device), hardware, fresh=False)


# The phase groups of baseline timing (harness/phases.py: `eager/...`, `compile/...`, and a
# library baseline's `library:NAME/...`)
BASELINE_PHASES = (f"{REFERENCE_EAGER}/", f"{REFERENCE_COMPILE}/", "library:")


def record_call(call: Call, outcomes: list[BenchOutcome], seconds: float,
                empty_before: bool) -> dict[str, Any]:
    """Add this call to NAME-suite-calls.jsonl and sum the calls into NAME-suite-time.json:
    the suite's bench time measured call by call (each call pays its own runner's start, so
    the sum is an upper bound of one uninterrupted `solforge bench`)."""
    table = merge([o.phases for o in outcomes])
    store = open_store(f"sqlite:///{call.out / 'suite.db'}")
    left = len(planned_units(call, store, outcomes[-1].hardware)[1]) if outcomes else None
    line = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(seconds, 2), "measured": sum(o.measured for o in outcomes),
            "units_left": left, "empty_before": empty_before, "per_gpu": call.per_gpu,
            "baseline_seconds": round(sum(e["seconds"] for name, e in table.items()
                                          if name.startswith(BASELINE_PHASES)), 2)}
    ledger = call.out / f"{call.name}-suite-calls.jsonl"
    with ledger.open("a") as file:
        file.write(json.dumps(line) + "\n")
    calls = [json.loads(text) for text in ledger.read_text().splitlines() if text.strip()]
    total = sum(c["seconds"] for c in calls)
    summary = {"what": "the suite's `solforge bench` time, summed over the calls that benched "
                       "it (measured, not extrapolated)",
               "targets": call.targets, "calls": len(calls), "seconds": round(total, 2),
               "minutes": round(total / 60, 3), "complete": calls[-1]["units_left"] == 0,
               "from_an_empty_store": calls[0]["empty_before"],
               "baseline_seconds": round(sum(c["baseline_seconds"] for c in calls), 2),
               "measured": sum(c["measured"] for c in calls),
               # units per GPU in each call (1 where the ledger predates --per-gpu)
               "per_gpu": sorted({c.get("per_gpu", 1) for c in calls})}
    (call.out / f"{call.name}-suite-time.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"bench time: {seconds:.1f} s this call, {total / 60:.2f} min over {len(calls)} calls"
        + ("" if summary["complete"] else f"; {left} units left"))
    return summary


def store_is_empty(call: Call) -> bool:
    """No trace in OUTDIR/suite.db yet (or no store): a bench from nothing."""
    path = call.out / "suite.db"
    return not path.is_file() or not open_store(f"sqlite:///{path}").has_traces()


def problem_record(results: ProblemResults, baseline: str, scored: bool,
                   shipped: set[str], floor_ms: float | None = None) -> dict[str, Any]:
    """One problem: its bound, its baselines and every shipped solution on it."""
    compiled = compile_line(results, scored)
    floor = floor_ms if scored else None
    record: dict[str, Any] = {
        "problem": results.address, "tier": results.tier, "workloads": len(results.workloads),
        "t_sol_ms": _median(results.t_sol_ms.values()),
        "eager_ms": _median(_passing(results, "eager")),
        "compile_ms": _median(_passing(results, "compile")),
        "compile_sol_score": compiled.sol_score if compiled else None,
        "launch_bound_workloads": (None if floor is None else
                                   sum(launch_bound(t, floor) for t in results.t_sol_ms.values())),
        "solutions": []}
    for name, outcomes in results.solutions.items():
        line = solution_line(results, name, outcomes, baseline, scored)
        fraction = summarize(name, line.scores).fraction_of_sol_median if line.scores else None
        record["solutions"].append({
            "name": name, "shipped": name in shipped, "passed": line.passed,
            "workloads": line.count, "sol_score": line.sol_score, "fraction_of_sol": fraction,
            "speedup_eager": line.speedup_eager, "speedup_compile": line.speedup_compile,
            **workload_times(results, outcomes, floor)})
    return record


def workload_times(results: ProblemResults, outcomes: dict[str, Measured],
                   floor_ms: float | None) -> dict[str, Any]:
    """Per workload (T_SOL ms, T_k ms or None if it failed), and the median reach
    max(T_SOL, floor) / T_k over the workloads that passed (None on the CPU)."""
    times = [(results.t_sol_ms[uuid], m.latency_ms if m.passed else None)
             for uuid, m in outcomes.items() if uuid in results.t_sol_ms]
    reaches = [reach(t_k, t_sol, floor_ms) for t_sol, t_k in times
               if floor_ms is not None and t_k]
    return {"workload_times": times,
            "reach": statistics.median(reaches) if reaches else None}


def goals_part(records: list[dict[str, Any]], scored: bool) -> dict[str, Any]:
    """The goals file's suite keys: problems benched, and the shipped solutions' problems,
    median T_SOL / T_k over their workloads (T_SOL >= 10 us) and problems faster than
    torch.compile on every workload's geometric mean."""
    shipped = [(r, s) for r in records for s in r["solutions"] if s["shipped"]]
    times = [pair for _, s in shipped for pair in s["workload_times"]]
    faster = {r["problem"] for r, s in shipped if s["passed"] == s["workloads"]
              and s["speedup_compile"] is not None and s["speedup_compile"] > 1}
    return {"suite_problems": sum(r["eager_ms"] is not None for r in records),
            "shipped": {"problems": len({r["problem"] for r, _ in shipped}),
                        "median_fraction_of_sol": (median_fraction_of_sol(times) if scored
                                                   else None),
                        "faster_than_compile": len(faster)}}


def goal(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The shipped solutions against issue 5's targets, over the problems they cover."""
    shipped = [s for r in records for s in r["solutions"] if s["shipped"]]
    fractions = [s["fraction_of_sol"] for s in shipped if s["fraction_of_sol"] is not None]
    faster = [s for s in shipped if s["speedup_compile"] is not None and s["speedup_compile"] > 1
              and s["passed"] == s["workloads"]]
    median = statistics.median(fractions) if fractions else None
    return {"shipped_solutions": len(shipped),
            "all_workloads_passed": sum(s["passed"] == s["workloads"] for s in shipped),
            "median_fraction_of_sol": median,
            "fraction_target": GOAL_FRACTION,
            "fraction_met": median is not None and median >= GOAL_FRACTION,
            "faster_than_compile": len(faster),
            "faster_target": max(len(shipped), GOAL_SHIPPED),
            "faster_met": len(shipped) >= GOAL_SHIPPED and len(faster) == len(shipped)}


def stored_outcome(call: Call) -> BenchOutcome:
    """The store as one bench outcome, with nothing run: the machine and the profile its
    latest run of `call.device` recorded, every planned problem's rows (added where missing)."""
    store = open_store(f"sqlite:///{call.out / 'suite.db'}", must_exist=True)
    runs = [r for r in store.rows(Run) if r.device == call.device]
    machines = {t.hardware for t in store.traces() if t.device == call.device}
    if not runs or len(machines) != 1:
        raise SolforgeError(f"{call.out / 'suite.db'}: expected the runs of one {call.device} "
                            f"machine, found {len(runs)} runs on {sorted(machines)}")
    (hardware,) = machines
    stored, _, skipped = planned_units(call, store, hardware)
    profile = max(runs, key=lambda r: r.id).hardware
    return BenchOutcome(0, call.device, hardware, profile, tuple(stored), 0, skipped, False, ())


def write_tables(call: Call, outcomes: list[BenchOutcome],
                 environment: dict[str, Any] | None = None) -> dict[str, Any]:
    """NAME-suite.{json,md} from the store: every problem benched by this or an earlier call."""
    store = open_store(f"sqlite:///{call.out / 'suite.db'}")
    found = find_solutions(solution_folders([], bundled=True))
    shipped = {s.name for solutions in found.by_definition.values() for s in solutions}
    baseline = baseline_of(call)
    scored = call.device == "cuda"
    results = [r for outcome in outcomes for r in read_results(store, outcome)]
    records = [problem_record(r, baseline, scored, shipped, call.floor_ms) for r in results]
    tiers = [vars(line) for line in tier_lines(results, baseline, scored)]
    summary = {"what": "solforge bench over the bundled suite with the shipped solutions",
               "date": datetime.date.today().isoformat(),
               "environment": environment or recorded_environment(call.device),
               "device": call.device, "baseline": baseline, "launch_floor_ms": call.floor_ms,
               "problems_benched": len(records), "tiers": tiers, "goal": goal(records),
               "problems": records}
    (call.out / f"{call.name}-suite.json").write_text(json.dumps(summary, indent=1) + "\n")
    (call.out / f"{call.name}-suite.md").write_text(markdown(summary))
    merge_goals(goals_path(call.out, call.name), goals_part(records, scored))
    return summary


def write_report(call: Call) -> None:
    data = gather(open_store(f"sqlite:///{call.out / 'suite.db'}", must_exist=True))
    (call.out / f"{call.name}-suite-report.html").write_text(render(data))


def markdown(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    lines = [f"# solforge bench over the suite ({summary['date']})", "",
             f"{env['summary']}; device {summary['device']}, T_b = {summary['baseline']}; "
             f"{summary['problems_benched']} problems.", "",
             "| tier | problems | with solutions | compile median S | solutions median S | "
             "median T_SOL/T_k |", "|---|---|---|---|---|---|"]
    for tier in summary["tiers"]:
        lines.append(f"| {tier['tier']} | {tier['problems']} | {tier['with_solutions']} | "
                     f"{fmt(tier['compile_sol_score'])} | {fmt(tier['sol_score'])} | "
                     f"{fmt(tier['fraction_of_sol'])} |")
    target = summary["goal"]
    lines += ["", f"Shipped solutions: {target['shipped_solutions']}, median T_SOL/T_k "
              f"{fmt(target['median_fraction_of_sol'])} (target {GOAL_FRACTION}), faster than "
              f"torch.compile on {target['faster_than_compile']} (target "
              f"{target['faster_target']}).", "",
              f"Reach = max(T_SOL, launch floor {fmt(summary['launch_floor_ms'])} ms) / T_k; "
              "launch-bound = workloads whose T_SOL is under that floor.", "",
              "| problem | T_SOL ms | launch-bound | eager ms | compile ms | solution | passed | "
              "S | T_SOL/T_k | reach | vs compile |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for record in summary["problems"]:
        bound = record["launch_bound_workloads"]
        bound_cell = "-" if bound is None else f"{bound}/{record['workloads']}"
        head = (f"| {record['problem']} | {fmt(record['t_sol_ms'])} | {bound_cell} | "
                f"{fmt(record['eager_ms'])} | {fmt(record['compile_ms'])} |")
        if not record["solutions"]:
            lines.append(head + " - | | | | | |")
        for solution in record["solutions"]:
            lines.append(f"{head} {solution['name']} | {solution['passed']}/"
                         f"{solution['workloads']} | {fmt(solution['sol_score'])} | "
                         f"{fmt(solution['fraction_of_sol'])} | {fmt(solution['reach'])} | "
                         f"{fmt(solution['speedup_compile'])} |")
    return "\n".join(lines) + "\n"


def _passing(results: ProblemResults, kind: str) -> list[float]:
    return [m.latency_ms for m in results.references.get(kind, {}).values()
            if m.passed and m.latency_ms is not None]


def _median(values: Any) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def floor_ms(given: Path | None) -> float:
    """The launch floor from the file given, else from the first recorded one."""
    found = given or next((path for path in LAUNCH_FLOORS if path.is_file()), None)
    if found is None:
        sys.exit("no launch floor recorded: run benchmarks/launch_floor.py or pass --launch-floor")
    try:
        return launch_floor_ms(found)
    except ValueError as exc:
        sys.exit(f"suite_gpu.py: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("targets", nargs="*", default=["all"])
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--name", default=None, help="files' prefix (default: h200, or cpu)")
    parser.add_argument("--chunk", type=int, default=None,
                        help="problems per bench run (default: all on a GPU, 1 on the CPU)")
    parser.add_argument("--launch-floor", type=Path, default=None,
                        help="launch_floor.py's file (default: the newest recorded H200 one)")
    parser.add_argument("--per-gpu", type=int, default=1,
                        help="units sharing the GPU, their timed calls one at a time")
    parser.add_argument("--tables-only", action="store_true",
                        help="bench nothing: write the files again from OUTDIR/suite.db")
    args = parser.parse_args()
    started = time.monotonic()
    if args.device == "cuda" and not torch.cuda.is_available() and not args.tables_only:
        sys.exit("no CUDA GPU: run on the H200, or pass --device cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("h200" if args.device == "cuda" else "cpu")
    if args.chunk is not None and args.chunk < 1:
        sys.exit(f"--chunk {args.chunk}: give at least 1 problem per run")
    if args.per_gpu != 1 and args.device != "cuda":
        sys.exit(f"--per-gpu {args.per_gpu}: units share a GPU, not the CPU")
    call = Call(args.out.resolve(), args.targets, args.deadline_s, args.device, name,
                floor_ms(args.launch_floor) if args.device == "cuda" else None,
                args.chunk or (0 if args.device == "cuda" else 1), args.per_gpu)
    if args.tables_only:
        earlier = call.out / f"{name}-suite.json"
        environment = (json.loads(earlier.read_text())["environment"] if earlier.exists()
                       else None)
        summary = write_tables(call, [stored_outcome(call)], environment)
    else:
        empty = store_is_empty(call)
        began = time.monotonic()
        outcomes = bench_until_deadline(call, started)
        if any(o.measured or o.left for o in outcomes):  # a call with work in it
            record_call(call, outcomes, time.monotonic() - began, empty)
        save_phases(call, outcomes)
        summary = write_tables(call, outcomes)
    if summary["problems"]:
        write_report(call)
    else:
        log("nothing benched yet: no report")
    log(f"goal: {summary['goal']}")


if __name__ == "__main__":
    try:
        main()
    except SolforgeError as exc:  # a bad target or problem: its message, not a traceback
        sys.exit(f"{Path(__file__).name}: {exc}")
