"""Issue 13 on one H200: evaluation throughput, in one call of at most 9 minutes, resumable.

    python benchmarks/throughput_gpu.py OUTDIR [--state DIR] [--deadline-s 540]
        [--candidates 72] [--problems P ...] [--before 3] [--suite-sample 4]
        [--device cuda|cpu] [--name h200] [--per-gpu 1] [--no-race]

Stages; each one's result is kept in the state folder (default OUTDIR/NAME-throughput-state)
and a later call skips the stages already there:
1. `before`: `--before` template candidates of the first problem with pre-spawning off
   (SOLFORGE_WORKER_POOL=0: a fresh unit process and fresh workers per candidate, the harness
   as it was), with their phase table: the "before" column.
2. `optimizer`: a template search (what `solforge optimize` runs) of `--candidates` spread over
   the problems, through the local runner, one unit per GPU (`--per-gpu N`: N units share
   it, their timed calls one at a time, harness/device_lock.py). GPU-machine seconds per
   judged candidate are the gaps between consecutive results (the machine's wall time each
   candidate costs in a queue that keeps the GPU busy): their median with one unit per GPU,
   their mean with several (units side by side end in bursts, and the median gap of a burst
   says nothing of the rate); the first result of each problem also times its baselines and
   is reported apart. With racing (the optimizer's default; `--no-race` turns it off) a
   candidate may take two units, its brief timing and its full one, so the rate is the span
   from the first result to the last over the candidates judged after the first (with one
   unit a candidate, the gaps' mean), whatever the units per GPU. The phases of every unit are
   summed into the table; with units
   sharing a GPU, `device_held_per_candidate` is how long each candidate's unit held its lock
   in each mode (the exclusive seconds bound the rate: the timed calls run one at a time). Each
   problem's search is kept in the state folder the moment it ends (a call cut short loses
   only the problem in flight), and the record is rewritten after each one. A later call
   with more `--problems` searches the new ones and sums all of them.
3. `suite`: `solforge bench` (eager and torch.compile baselines, shipped solutions) on
   `--suite-sample` problems spread over the suite: cold (empty baseline store), then warm (a
   new results store, the baseline store kept). The suite's minutes are EXTRAPOLATED from the
   sample (mean seconds per problem x the suite's problems), labelled so, with what was
   measured. Started only with about SUITE_SECONDS_PER_PROBLEM a problem left, always from an
   empty store, and kept only once both modes are measured (a cut sample records nothing).
4. The baseline store is exported to OUTDIR/NAME-baselines.json: `solforge baselines import`
   on a fresh machine starts it warm.

Writes OUTDIR/NAME-throughput.json: `gpu_seconds_per_candidate`, `candidates`,
`suite_cold_minutes`, `suite_warm_minutes`, `phases` (per candidate, seconds), `phases_before`,
machine, versions, date. `--device cpu` runs every stage in CPU mode at a small size (what
tests/test_benchmark_scripts.py runs); its numbers are CPU numbers.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import log, recorded_environment  # noqa: E402

from solforge.bench.plan import find_solutions, plan_problems, solution_folders  # noqa: E402
from solforge.bench.run import BenchConfig, run_bench  # noqa: E402
from solforge.defaults import DEFAULT_BASELINE  # noqa: E402
from solforge.errors import SolforgeError  # noqa: E402
from solforge.forge.loop import OptimizeConfig, Optimizer  # noqa: E402
from solforge.harness.baseline import BaselineCache, export_baselines  # noqa: E402
from solforge.harness.phases import HELD, format_table, is_held, merge  # noqa: E402
from solforge.problem.suite import bundled_problem_dirs, open_problem  # noqa: E402
from solforge.runners import TaskResult, open_runner  # noqa: E402
from solforge.runners.local import spares_per_slot  # noqa: E402
from solforge.storage import open_store  # noqa: E402

# Four problems, three template families (row norms, activations, RoPE); the fourth came after
# the first three gave 48 candidates on the H200 (2026-12-02), short of the goal's 50. Not the
# 128256-wide softmax: its largest workload moves 2 GiB in and 4 GiB out per timed call through
# host memory (the sandbox's private uid rules out CUDA IPC), minutes per candidate on its own.
PROBLEMS = ("l1/rmsnorm_llama3_1_8b", "l1/layernorm_whisper_large_v3", "l1/swiglu_llama3_1_8b",
            "l1/rope_cos_sin_cache_qwen3_32b")
MARGIN_S = 20.0
# Seconds one sampled problem takes through `bench`, cold then warm. On the H200 the sample of
# 4 took 184.7 + 75.1 s (2026-12-02e), then 147.0 + 41.7 s (2026-12-02f, baselines' inputs
# made in their workers, stored baselines read in the driver): 65 s a problem at most, so 75
# leaves a margin. A suite sample cut by the call's limit records nothing, so it starts only
# with this much time per problem left.
SUITE_SECONDS_PER_PROBLEM = {"cuda": 75.0, "cpu": 20.0}
# gpu_seconds_per_candidate: the median gap with one unit per GPU and no racing, else the
# mean (units side by side end in bursts; racing times some candidates twice)
_STATISTIC = {False: "seconds_per_candidate_median", True: "seconds_per_candidate_gaps_mean"}
GOAL = {"gpu_seconds_per_candidate": 0.5, "suite_cold_minutes": 30.0, "suite_warm_minutes": 10.0}


@dataclass(frozen=True)
class Call:
    out: Path
    state: Path
    device: str
    name: str
    candidates: int
    problems: tuple[str, ...]
    before: int
    suite_sample: int
    deadline: float  # time.monotonic() at which the call must have written its result
    per_gpu: int = 1  # units sharing the GPU in the optimizer stage
    race: bool = True  # the optimizer's racing (forge/loop.py): brief timing, full near the best

    @property
    def statistic(self) -> str:
        return _STATISTIC[self.per_gpu > 1 or self.race]

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def cache(self) -> Path:
        return self.state / "cache"


class Recording:
    """A runner that notes each result and when it came back (what the optimizer sees is
    unchanged)."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.slots = runner.slots
        self.machine = runner.machine
        self.results: list[tuple[float, TaskResult]] = []

    def submit(self, task) -> None:
        self.runner.submit(task)

    def next_result(self, timeout: float | None = None) -> TaskResult | None:
        result = self.runner.next_result(timeout)
        if result is not None:
            self.results.append((time.monotonic(), result))
        return result


def search(call: Call, problems: list[str], total: int, store_name: str,
           on_problem=lambda: None, race: bool | None = None) -> dict[str, Any]:
    """Template searches of `total` candidates over `problems`; what each one cost. A problem
    searched in an earlier call is read from the state folder; `on_problem` runs after each."""
    store = open_store(f"sqlite:///{call.state / store_name}")
    per_problem = max(1, total // len(problems))
    done = [_problem_file(call, store_name, a) for a in problems]
    with open_runner("local", call.device, call.per_gpu, per_gpu=call.per_gpu) as runner:
        for number, address in enumerate(problems):
            if done[number].is_file():
                log(f"{address}: searched in an earlier call")
                continue
            if call.left() < MARGIN_S + 10:
                log(f"{address}: not started, {call.left():.0f} s left; run it again")
                break
            todo = sum(not f.is_file() for f in done[number:])
            share = (call.left() - MARGIN_S) / todo  # a fair share of what is left
            result = _search_one(call, runner, store, address, per_problem, share,
                                 call.race if race is None else race)
            done[number].write_text(json.dumps(result, indent=1) + "\n")
            on_problem()
    found = [json.loads(f.read_text()) for f in done if f.is_file()]
    return _summed(found, problems)


def _search_one(call: Call, runner, store, address: str, budget: int,
                share_s: float, race: bool) -> dict[str, Any]:
    """One problem's search: its gaps between results, its units' phases and statuses."""
    recording = Recording(runner)
    config = OptimizeConfig(budget=budget, minutes=max(share_s, 5.0) / 60, device=call.device,
                            baseline=DEFAULT_BASELINE[call.device], cache_dir=call.cache,
                            ncu=False, race=race)
    begun = time.monotonic()
    outcome = Optimizer(open_problem(address), store, config, lambda text: None, recording,
                        address).run()
    times = [begun] + [at for at, _ in recording.results]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    statuses: dict[str, int] = {}
    for _, result in recording.results:
        for trace in result.traces:
            name = trace.evaluation.status.value
            statuses[name] = statuses.get(name, 0) + 1
    wall = time.monotonic() - begun
    log(f"{address}: {outcome.judged} candidates ({outcome.confirmed} timed again in full, "
        f"{outcome.screened} kept brief) in {len(recording.results)} units, {wall:.1f} s")
    return {"problem": address, "candidates": outcome.judged, "units": len(recording.results),
            "race": race, "confirmed": outcome.confirmed, "screened": outcome.screened,
            "brief_and_full_fitness": [list(pair) for pair in outcome.confirmations],
            "span_seconds": sum(gaps[1:]),
            "wall_seconds": round(wall, 2), "first_seconds": gaps[0] if gaps else None,
            "gaps": gaps[1:], "unit_seconds": [r.seconds for _, r in recording.results],
            "statuses": statuses, "phases": merge([r.phases for _, r in recording.results])}


def _summed(found: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    """The optimizer stage's record from the problems searched so far."""
    judged = sum(f["candidates"] for f in found)
    gaps = [g for f in found for g in f["gaps"]]
    # From each problem's first result to its last, over the candidates judged after the
    # first (problems searched before racing have no span: their gaps, one unit a candidate)
    span = sum(f.get("span_seconds", sum(f["gaps"])) for f in found)
    after_first = sum(max(f["candidates"] - 1, 0) for f in found)
    units = [u for f in found for u in f["unit_seconds"]]
    wall = sum(f["wall_seconds"] for f in found)
    statuses: dict[str, int] = {}
    for f in found:
        for name, count in f["statuses"].items():
            statuses[name] = statuses.get(name, 0) + count
    table = merge([f["phases"] for f in found])
    return {
        "candidates": judged, "problems": [f["problem"] for f in found],
        "units": sum(f.get("units", f["candidates"]) for f in found),
        "timed_again_in_full": sum(f.get("confirmed", 0) for f in found),
        "kept_brief": sum(f.get("screened", 0) for f in found),
        "brief_vs_full_fitness": _brief_vs_full(found),
        "problems_left": [p for p in problems if p not in {f["problem"] for f in found}],
        "wall_seconds": round(wall, 2),
        "seconds_per_candidate_median": _round(statistics.median(gaps) if gaps else None),
        "seconds_per_candidate_gaps_mean": _round(span / after_first if after_first else None),
        "seconds_per_candidate_mean": _round(wall / judged if judged else None),
        "first_candidate_seconds": [_round(f["first_seconds"]) for f in found],
        "unit_seconds_median": _round(statistics.median(units) if units else None),
        "trace_statuses": statuses,
        "phases": _per_candidate(table, judged),
        "phases_table": format_table(table, judged),
        "device_held_per_candidate": _held_per_candidate(table, judged),
    }


def _brief_vs_full(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How far the brief fitness of the candidates timed twice was from their full one
    (relative), the evidence for the racing margin (forge/loop.py CONFIRM_MARGIN)."""
    pairs = [(brief, full) for f in found for brief, full in f.get("brief_and_full_fitness", [])
             if full]
    if not pairs:
        return None
    gaps = sorted(abs(brief - full) / abs(full) for brief, full in pairs)
    return {"candidates": len(gaps), "median": _round(statistics.median(gaps)),
            "max": _round(gaps[-1])}


def _problem_file(call: Call, store_name: str, address: str) -> Path:
    return call.state / f"{Path(store_name).stem}-{address.replace('/', '--')}.json"


def suite(call: Call) -> dict[str, Any] | None:
    """`solforge bench` on a sample of the suite, cold then warm; extrapolated to the suite.
    None when too little time is left to measure it."""
    every = bundled_problem_dirs()
    found = find_solutions(solution_folders([], bundled=True))
    with_solutions = [f for f in every if f.name in found.by_definition]
    step = max(1, len(every) // max(call.suite_sample, 1))
    sample = list(dict.fromkeys([*with_solutions[:max(1, call.suite_sample // 3)],
                                 *every[::step]]))[:call.suite_sample]
    planned = plan_problems([str(f) for f in sample], found, call.device)
    needed = SUITE_SECONDS_PER_PROBLEM[call.device] * len(planned)
    if call.left() < needed + MARGIN_S:
        log(f"suite: not started, about {needed:.0f} s needed and {call.left():.0f} s left; "
            "run the same command again")
        return None
    cache = call.state / "suite-cache"
    # Cold means cold: nothing from a sample an earlier call started and did not finish.
    shutil.rmtree(cache, ignore_errors=True)
    for mode in ("cold", "warm"):
        (call.state / f"suite-{mode}.db").unlink(missing_ok=True)
    measured = {}
    for mode in ("cold", "warm"):
        if call.left() < MARGIN_S + 10:
            log(f"suite {mode}: skipped, {call.left():.0f} s left")
            break
        config = BenchConfig(device=call.device, baseline=DEFAULT_BASELINE[call.device],
                             cache_dir=cache, command=f"benchmarks/throughput_gpu.py ({mode})")
        began = time.monotonic()
        outcome = run_bench(planned, open_store(f"sqlite:///{call.state / f'suite-{mode}.db'}"),
                            config)
        seconds = time.monotonic() - began
        measured[mode] = {"seconds": round(seconds, 2), "traces": outcome.measured,
                          "failures": list(outcome.failures), "phases": outcome.phases}
        log(f"suite {mode}: {len(planned)} problems in {seconds:.1f} s; the units' phases "
            f"(seconds, summed over units):\n{format_table(outcome.phases, 1)}")
    scale = len(every) / len(planned)
    return {
        "sample": [p.address for p in planned], "suite_problems": len(every),
        "measured": measured,
        "extrapolated": True,
        "how": f"mean seconds per problem over the {len(planned)} sampled problems x "
               f"{len(every)} problems",
        "cold_minutes": _round(measured["cold"]["seconds"] * scale / 60
                               if "cold" in measured else None),
        "warm_minutes": _round(measured["warm"]["seconds"] * scale / 60
                               if "warm" in measured else None),
    }


def stage(call: Call, name: str, work, finished=lambda result: True) -> dict[str, Any] | None:
    """Run a stage unless its result is in the state folder; None when it did not finish
    (a result that is not `finished` is returned but not kept: the next call goes on)."""
    path = call.state / f"{name}.json"
    if path.is_file():
        log(f"{name}: done in an earlier call")
        return json.loads(path.read_text())
    if call.left() < MARGIN_S + 10:
        log(f"{name}: not started, {call.left():.0f} s left; run the same command again")
        return None
    log(f"{name}: starting ({call.left():.0f} s left)")
    result = work()
    if finished(result):
        path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def before(call: Call) -> dict[str, Any]:
    """The first problem's search with pre-spawning off: the harness as it was."""
    os.environ["SOLFORGE_WORKER_POOL"] = "0"
    try:
        return search(call, [call.problems[0]], call.before, "before.db", race=False)
    finally:
        del os.environ["SOLFORGE_WORKER_POOL"]


def run(call: Call) -> dict[str, Any]:
    call.state.mkdir(parents=True, exist_ok=True)
    old = stage(call, "before", lambda: before(call)) if call.before else None

    def partial() -> None:  # a record after each problem: a call cut short keeps its work
        write_record(call, old, _so_far(call), None)

    # Not a kept stage: each problem's search is kept as it ends, so a later call with more
    # `--problems` searches only the new ones and sums them with the earlier ones.
    log(f"optimizer: {call.left():.0f} s left")
    now = search(call, list(call.problems), call.candidates, "forge.db", partial)
    sampled = (stage(call, "suite", lambda: suite(call), finished=_both_modes)
               if call.suite_sample else None)
    return write_record(call, old, now, sampled)


def _both_modes(sampled: dict[str, Any] | None) -> bool:
    """A suite sample is kept only once measured cold and warm (else the next call redoes it)."""
    return sampled is not None and sampled["warm_minutes"] is not None


def _so_far(call: Call) -> dict[str, Any]:
    """The optimizer stage from the problems kept in the state folder."""
    files = [_problem_file(call, "forge.db", a) for a in call.problems]
    return _summed([json.loads(f.read_text()) for f in files if f.is_file()],
                   list(call.problems))


def write_record(call: Call, old: dict[str, Any] | None, now: dict[str, Any] | None,
                 sampled: dict[str, Any] | None) -> dict[str, Any]:
    """Write OUTDIR/NAME-throughput.json from the stages measured so far."""
    exported = call.out / f"{call.name}-baselines.json"
    stores = [BaselineCache(folder / "baselines.jsonl")
              for folder in (call.cache, call.state / "suite-cache")
              if (folder / "baselines.jsonl").is_file()]
    count = export_baselines(stores, exported) if stores else 0
    record = {
        "what": "evaluation throughput on one GPU: seconds per judged optimizer candidate, the "
                "suite's minutes, and where the time goes",
        "date": datetime.date.today().isoformat(),
        "device": call.device,
        "environment": recorded_environment(call.device),
        "gpu_seconds_per_candidate": now and now[call.statistic],
        "per_candidate_statistic": call.statistic,
        "race": call.race,
        "per_gpu": call.per_gpu,
        "spares_per_slot": spares_per_slot(call.device, call.per_gpu),
        "candidates": now and now["candidates"],
        "suite_cold_minutes": sampled and sampled["cold_minutes"],
        "suite_warm_minutes": sampled and sampled["warm_minutes"],
        "suite_extrapolated": bool(sampled),
        "phases": now and now["phases"],
        "phases_before": old and old["phases"],
        "seconds_per_candidate_before": old and old["seconds_per_candidate_median"],
        "goal": GOAL,
        "optimizer": now, "before": old, "suite": sampled,
        "baselines_exported": {"file": exported.name, "entries": count} if count else None,
        "complete": all(x is not None for x in (now, sampled if call.suite_sample else 1,
                                                 old if call.before else 1))
                    and not (now or {}).get("problems_left"),
    }
    target = call.out / f"{call.name}-throughput.json"
    target.write_text(json.dumps(record, indent=1) + "\n")
    log(f"wrote {target}" + ("" if record["complete"] else " (incomplete: run it again)"))
    if now:
        print(now["phases_table"], flush=True)
    return record


def _per_candidate(table: dict[str, dict[str, float]], count: int) -> dict[str, float]:
    return {name: round(entry["seconds"] / max(count, 1), 4) for name, entry in table.items()}


def _held_per_candidate(table: dict[str, dict[str, float]], count: int) -> dict[str, float]:
    """Seconds each candidate's unit held the GPU's lock, by mode, its baselines' loops
    included: the exclusive seconds are a floor under the time between results."""
    held = {mode: sum(entry["seconds"] for name, entry in table.items()
                      if is_held(name) and name.endswith(f"{HELD}{mode}"))
            for mode in ("shared", "exclusive")}
    return {mode: round(seconds / max(count, 1), 4) for mode, seconds in held.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--state", type=Path, default=None)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--candidates", type=int, default=72)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument("--before", type=int, default=3)
    parser.add_argument("--suite-sample", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--name", default="h200")
    parser.add_argument("--per-gpu", type=int, default=1)
    parser.add_argument("--no-race", dest="race", action="store_false",
                        help="time every candidate in full (the optimizer without racing)")
    args = parser.parse_args(argv)
    if args.candidates < 1 or args.before < 0 or args.suite_sample < 0 or args.per_gpu < 1:
        raise SystemExit("--candidates and --per-gpu must be >= 1, --before and --suite-sample "
                         ">= 0")
    if args.per_gpu > 1 and args.device != "cuda":
        raise SystemExit("--per-gpu is for a GPU")
    try:
        for address in args.problems:
            open_problem(address)
    except SolforgeError as exc:
        raise SystemExit(str(exc)) from None
    args.out.mkdir(parents=True, exist_ok=True)
    call = Call(args.out, args.state or args.out / f"{args.name}-throughput-state",
                args.device, args.name, args.candidates, tuple(args.problems), args.before,
                args.suite_sample, time.monotonic() + args.deadline_s, args.per_gpu, args.race)
    run(call)


if __name__ == "__main__":
    main()
