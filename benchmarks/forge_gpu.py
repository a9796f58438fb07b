"""Issue 6 on the H200: template search (`solforge optimize --proposer templates`) over L1 and
L2 problems, within a deadline per call, resumable, and the goal numbers from what it found.

    python benchmarks/forge_gpu.py OUTDIR [PROBLEM ...] [--count N] [--budget 32]
                                   [--patience 8] [--deadline-s 540] [--device cuda|cpu]
                                   [--name h200] [--compose [--seeds]] [--again TEXT ...]
    python benchmarks/forge_gpu.py OUTDIR --tables-only   (the summary again, no GPU)

Problems: those given, else every bundled L1 and L2 problem that a template applies to (47), in
suite order (--count N: the first N). Until 2026-12-06 the default was the first 24: in suite
order that took 9 of the 12 GEMMs among its first 20, where cuBLAS is the baseline to beat,
against a quarter of the whole set. Each is searched with up to --budget candidates into
OUTDIR/forge.db (the archive; a rerun reuses every candidate already judged), judged through the
local runner as `solforge optimize` judges them (one slot, spare processes started ahead, and
racing since 2026-12-06: timed briefly, in full only near the best; `timed_again_in_full` and
`kept_brief` count them); a
template's search ends once --patience candidates in a row have not raised the best fitness by
more than 1% (the problem has converged when every template's search ended so, or ran out of
settings, before the budget did: its record's `converged`). Once its search is done, its best
elite is evaluated once more through the harness with T_b = the faster of eager and
torch.compile, so every workload has both baselines' times. A search gets the call's time
left, less a margin and the time its best elite's evaluation takes; one that the deadline cuts
is noted in OUTDIR/NAME-forge-cuts.jsonl and the next call goes on with it (the candidates
already judged are read back from the archive and count against its budget), so a call's tail
is searched, not left idle. A problem starts only while MIN_SEARCH_S of search are left;
finished problems are listed in OUTDIR/NAME-forge.jsonl and skipped by the next call. Per
problem it records: candidates judged (over every call that searched it) and their statuses,
the wall seconds the search held the GPU, the archive's cells and elites'
descriptors, the best elite's mean S against the best baseline and against eager, its median
T_SOL / T_k, its geometric-mean speedup over torch.compile, and the bound that binds. Then
NAME-forge.json / .md hold the goal of issue 6: over at least 20 problems, median T_SOL / T_k
>= 0.75, median S >= 0.85 against eager and >= 0.60 against the best baseline, faster than
torch.compile on at least 80% (the `forge` keys of NAME-goals.json, merged with
suite_gpu.py's); and where the search stalls (problems below 0.75 of the speed of
light, with their binding bound and their elites' cells). `--device cpu` runs the CPU mode
(smallest workload, speedups only): what tests/benchmarks/test_benchmark_scripts.py runs.

`--again TEXT` searches again the finished problems whose address contains a TEXT, after one
of their templates changed: their lines in NAME-forge.jsonl, NAME-forge-cuts.jsonl and
NAME-forge-compose.jsonl are dropped when the call starts, and the archive judges the changed
template's candidates anew (a candidate is found by the hash of its sources), beside the
earlier ones. Give it to one call only: a search it starts and the deadline cuts goes on in the
next call as any cut search does.

A search ends with a per-shape composite (solforge.forge.compose: each workload shape sent to
the candidate fastest on it), judged like any candidate. `--compose` adds one to the problems
an earlier call finished instead of searching (of the PROBLEMs given, when some are): per
problem, the best candidate of each template (at most 4) lacking per-workload results is judged
again (stores written before they were kept have none), the problem's reference is judged as a
part (solforge.forge.reference_part), the composite is judged, and, when it became the best
elite, it is evaluated as a search's best is. Each is noted in OUTDIR/NAME-forge-compose.jsonl
(a later call skips it); from then on the summaries show its `composite` and, when it won, its
`best`. A line without `reference_returns` was composed while the reference part still wrote
into pre-allocated outputs (a copy, and on small shapes the host's time before it, that made
the part lose shapes eager PyTorch wins): its problem is composed again, with the reference
judged as it is now, and the latest line counts. With `--seeds`, each template's seeds the
archive lacks (settings known to suit the H200, added after most problems were searched) are
judged first, as candidates of their template, so the composite can draw on them: a seed can
also become the best elite.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from goals_file import goals_path, median_fraction_of_sol, merge_goals  # noqa: E402
from script_common import fmt, log, recorded_environment  # noqa: E402

from solforge.data.solution import parse_solution  # noqa: E402
from solforge.data.trace import Status, Trace  # noqa: E402
from solforge.defaults import resolve_run  # noqa: E402
from solforge.errors import SolforgeError  # noqa: E402
from solforge.forge import archive  # noqa: E402
from solforge.forge.loop import OptimizeConfig, Optimizer  # noqa: E402
from solforge.forge.reference_part import part_name  # noqa: E402
from solforge.forge.templates import templates_for  # noqa: E402
from solforge.harness.evaluate import EvalConfig, evaluate  # noqa: E402
from solforge.problem.problem import Problem  # noqa: E402
from solforge.problem.suite import bundled_problem_dirs, open_problem, tier_of  # noqa: E402
from solforge.runners import TaskRunner, open_runner  # noqa: E402
from solforge.score import ScoreError, sol_score  # noqa: E402
from solforge.storage import open_store  # noqa: E402

MARGIN_S = 30.0  # a candidate started just before a search's deadline ends within it
FINAL_S = 60.0  # kept for the best elite's evaluation on every workload
MIN_SEARCH_S = 60.0  # a search given less is not started (about ten candidates on the H200)
MIN_COMPOSE_S = 60.0  # a recomposition given less is not started (up to five judgments)
GOAL = {"problems": 20, "fraction_of_sol": 0.75, "s_vs_eager": 0.85, "s_vs_best": 0.60,
        "beats_compile_share": 0.80}


@dataclass(frozen=True)
class Call:
    out: Path
    problems: list[str]
    budget: int
    deadline_s: float
    device: str
    name: str
    patience: int | None = None
    compose: bool = False  # compose the finished problems instead of searching
    seeds: bool = False  # with compose: judge the templates' seeds the archive lacks first
    again: tuple[str, ...] = ()  # search again the finished problems whose address has one
    per_gpu: int = 1  # candidates judged side by side on the GPU (harness/device_lock.py)

    @property
    def progress(self) -> Path:
        return self.out / f"{self.name}-forge.jsonl"

    @property
    def cuts(self) -> Path:
        """Searches the deadline cut: one line per call, for the call that finishes them."""
        return self.out / f"{self.name}-forge-cuts.jsonl"

    @property
    def composed(self) -> Path:
        """Problems `--compose` composed (or found nothing to compose in): one line each."""
        return self.out / f"{self.name}-forge-compose.jsonl"


def default_problems(count: int | None = None) -> list[str]:
    """The bundled L1 and L2 problems that some template solves (the first `count` of them)."""
    chosen = []
    for folder in bundled_problem_dirs():
        if tier_of(folder) not in ("l1", "l2"):
            continue
        problem = open_problem(folder)
        if templates_for(problem.definition):
            chosen.append(f"{tier_of(folder)}/{folder.name}")
        if len(chosen) == count:
            break
    return chosen


def forget(call: Call) -> list[str]:
    """Drop what the progress, cuts and compose files hold of the problems `call.again` names;
    the problems forgotten."""
    forgotten: set[str] = set()
    for path in (call.progress, call.cuts, call.composed):
        lines = _lines(path)
        kept = [line for line in lines
                if not any(text in json.loads(line)["problem"] for text in call.again)]
        forgotten |= {json.loads(line)["problem"] for line in lines} - \
            {json.loads(line)["problem"] for line in kept}
        if len(kept) < len(lines):
            path.write_text("".join(f"{line}\n" for line in kept))
    return sorted(forgotten)


def search_until_deadline(call: Call, started: float) -> None:
    if call.again:
        log(f"searched again: {', '.join(forget(call)) or 'none of them was finished'}")
    done = {json.loads(line)["problem"] for line in _lines(call.progress)}
    store = open_store(f"sqlite:///{call.out / 'forge.db'}")
    with open_runner("local", call.device, call.per_gpu, per_gpu=call.per_gpu) as runner:
        for number, address in enumerate(call.problems, start=1):
            if address in done:
                continue
            search_s = call.deadline_s - (time.monotonic() - started) - MARGIN_S - FINAL_S
            if search_s < MIN_SEARCH_S:
                log(f"stopping before {address}: {max(search_s, 0):.0f} s of search left "
                    f"(at least {MIN_SEARCH_S:.0f} wanted); run the same command again to go on")
                return
            record = search_problem(call, store, address, runner, search_s)
            if record is None:
                log(f"[{number}/{len(call.problems)}] {address}: cut at the deadline; run the "
                    "same command again to go on with it")
                return
            with call.progress.open("a") as file:
                file.write(json.dumps(record) + "\n")
            log(f"[{number}/{len(call.problems)}] {address}: {record['judged']} judged in "
                f"{record['search_seconds']:.0f} s"
                f"{', converged' if record['converged'] else ''}, best {record['best']}")


def search_problem(call: Call, store: Any, address: str, runner: TaskRunner,
                   search_s: float) -> dict[str, Any] | None:
    """The problem's record once its search is done, or None when the deadline cut it (noted
    in `call.cuts` for the call that goes on with it)."""
    problem = open_problem(address)
    earlier = [json.loads(line) for line in _lines(call.cuts)]
    earlier = [cut for cut in earlier if cut["problem"] == address]
    judged_before = sum(cut["judged"] for cut in earlier)
    config = OptimizeConfig(budget=max(call.budget - judged_before, 0), minutes=search_s / 60,
                            device=call.device, baseline=resolve_run(call.device).baseline,
                            patience=call.patience)
    begun = time.monotonic()
    outcome = Optimizer(problem, store, config, lambda line: log(f"  {line}"), runner=runner,
                        address=address).run()
    seconds = time.monotonic() - begun
    if outcome.out_of_time:
        with call.cuts.open("a") as file:
            file.write(json.dumps({"problem": address, "judged": outcome.judged,
                                   "search_seconds": round(seconds, 1)}) + "\n")
        return None
    statuses = Counter(c.status for c in archive.candidates(store, problem.name))
    elites = archive.elites(store, problem.name)
    record = {"problem": address, "judged": judged_before + outcome.judged,
              "reused": outcome.reused, "converged": outcome.converged,
              "timed_again_in_full": outcome.confirmed, "kept_brief": outcome.screened,
              "statuses": dict(statuses), "calls": len(earlier) + 1,
              "search_seconds": round(seconds + sum(c["search_seconds"] for c in earlier), 1),
              "cells": [elite.cell for elite in elites], "best": None}
    if outcome.best is not None:
        record["best"] = best_record(call, problem, outcome.best)
    return record


def best_record(call: Call, problem: Problem, best: archive.Elite) -> dict[str, Any]:
    """The best elite evaluated once more, T_b the faster of eager and torch.compile."""
    config = EvalConfig(device=call.device, baseline=resolve_run(call.device).baseline,
                        smallest=1 if call.device == "cpu" else None)
    traces = evaluate(problem, parse_solution(best.solution), config)
    return {"name": best.name, "cell": best.cell, "fitness": best.fitness,
            **best_numbers(traces, scored=call.device == "cuda")}


def compose_until_deadline(call: Call, started: float) -> None:
    """Add a composite to each finished problem not composed yet, while time is left."""
    done = [json.loads(line)["problem"] for line in _lines(call.progress)]
    composed = {line["problem"] for line in map(json.loads, _lines(call.composed))
                if line.get("reference_returns")}
    store = open_store(f"sqlite:///{call.out / 'forge.db'}")
    with open_runner("local", call.device, call.per_gpu, per_gpu=call.per_gpu) as runner:
        for address in [a for a in done if a not in composed and a in call.problems]:
            left_s = call.deadline_s - (time.monotonic() - started) - MARGIN_S - FINAL_S
            if left_s < MIN_COMPOSE_S:
                log(f"stopping before composing {address}: {max(left_s, 0):.0f} s left; run "
                    "the same command again to go on")
                return
            line = compose_problem(call, store, address, runner, left_s)
            if line is None:
                log(f"{address}: composition cut at the deadline; run it again to go on")
                return
            with call.composed.open("a") as file:
                file.write(json.dumps(line) + "\n")


def compose_problem(call: Call, store: Any, address: str, runner: TaskRunner,
                    seconds: float) -> dict[str, Any] | None:
    """One problem's composition line, or None when the deadline cut it."""
    problem = open_problem(address)
    config = OptimizeConfig(budget=None, minutes=seconds / 60, device=call.device,
                            baseline=resolve_run(call.device).baseline)
    before = archive.elites(store, problem.name)
    begun = time.monotonic()
    optimizer = Optimizer(problem, store, config, lambda line: log(f"  {line}"), runner=runner,
                          address=address)
    found = optimizer.recompose(seeds=call.seeds)
    if found is None:
        return None
    after = archive.elites(store, problem.name)
    won = bool(after) and (not before or after[0].candidate_id != before[0].candidate_id)
    line = {"problem": address, "reference_returns": True, "rejudged": optimizer.rejudged,
            "seeds_judged": optimizer.seeds_judged,
            "composite": found.solution["name"] if found.solution else None,
            "reason": found.reason,
            "assignment": {uuid: judged.name for uuid, judged in found.assignment.items()},
            "verdict": _verdict_of(store, problem.name, found.solution),
            "seconds": round(time.monotonic() - begun, 1),
            "best": best_record(call, problem, after[0]) if won else None}
    new_best = f", new best elite {after[0].name}" if won else ""
    log(f"{address}: composite {line['composite'] or '-'} ({line['reason'] or 'judged'})"
        f"{new_best}")
    return line


def _verdict_of(store: Any, problem: str,
                solution: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored composite's status and fitness."""
    found = archive.find(store, problem, solution) if solution else None
    return {"status": found.status, "fitness": found.fitness} if found else None


def with_compositions(call: Call, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with what `--compose` added: the latest composition's `composite`, and the
    `best` of the latest composition that changed the best elite (a later one that did not
    leaves it the best); records of problems never composed are unchanged."""
    latest: dict[str, dict[str, Any]] = {}
    best: dict[str, dict[str, Any]] = {}
    for line in map(json.loads, _lines(call.composed)):
        latest[line["problem"]] = line
        if line["best"] is not None:
            best[line["problem"]] = line["best"]
    merged = []
    for record in records:
        line = latest.get(record["problem"])
        if line is not None:
            record = {**record, "composite": {k: v for k, v in line.items()
                                              if k not in ("problem", "best")}}
            record["best"] = best.get(record["problem"], record["best"])
        merged.append(record)
    return merged


def best_numbers(traces: list[Trace], scored: bool) -> dict[str, Any]:
    """The best elite against the bound and both baselines, over its workloads. CPU timings
    are not priced against T_SOL (`scored` False): then only the speedups."""
    passed = [t for t in traces if t.status is Status.PASSED]
    s_best, s_eager, fractions, over_compile, bounds = [], [], [], [], Counter()
    times = [(t.evaluation.t_sol_ms, t.evaluation.performance.latency_ms
              if t.status is Status.PASSED else None)
             for t in traces if scored and t.evaluation.t_sol_ms is not None]
    for trace in passed:
        evaluation = trace.evaluation
        t_k = evaluation.performance.latency_ms
        baseline = evaluation.baseline
        if evaluation.sol_score is not None:
            s_best.append(evaluation.sol_score)
        if evaluation.sol_bound is not None:
            bounds[evaluation.sol_bound] += 1
        if scored and evaluation.t_sol_ms is not None:
            fractions.append(min(evaluation.t_sol_ms / t_k, 1.0))
            if baseline is not None and baseline.eager_ms is not None:
                with contextlib.suppress(ScoreError):  # a baseline at the bound has no score
                    s_eager.append(sol_score(t_k, baseline.eager_ms, evaluation.t_sol_ms))
        if baseline is not None and baseline.compile_ms is not None:
            over_compile.append(baseline.compile_ms / t_k)
    return {"workloads": len(traces), "passed": len(passed),
            "s_vs_best": _mean(s_best), "s_vs_eager": _mean(s_eager),
            "fraction_of_sol": statistics.median(fractions) if fractions else None,
            "speedup_over_compile": _geomean(over_compile),
            "binding_bound": bounds.most_common(1)[0][0] if bounds else None,
            "workload_times": times}


def goal(records: list[dict[str, Any]]) -> dict[str, Any]:
    bests = [r["best"] for r in records if r["best"] is not None]

    def median(key: str) -> float | None:
        values = [b[key] for b in bests if b.get(key) is not None]
        return statistics.median(values) if values else None

    beats = [b["speedup_over_compile"] > 1 for b in bests
             if b.get("speedup_over_compile") is not None]
    share = sum(beats) / len(records) if records else None
    numbers = {"problems": len(records), "with_a_correct_kernel": len(bests),
               "converged": sum(bool(r.get("converged")) for r in records),
               "fraction_of_sol": median("fraction_of_sol"), "s_vs_eager": median("s_vs_eager"),
               "s_vs_best": median("s_vs_best"), "beats_compile_share": share}
    met = {key: numbers[key] is not None and numbers[key] >= target
           for key, target in GOAL.items()}
    stalls = [{"problem": r["problem"], "fraction_of_sol": r["best"]["fraction_of_sol"] if
               r["best"] else None, "binding_bound": r["best"]["binding_bound"] if r["best"]
               else None, "cells": r["cells"], "statuses": r["statuses"],
               "pytorch_fastest": pytorch_fastest(r)}
              for r in records if not r["best"] or (r["best"]["fraction_of_sol"] or 0) <
              GOAL["fraction_of_sol"]]
    return {"numbers": numbers, "targets": GOAL, "met": met, "stalls": stalls,
            "gpu_minutes": round(sum(r["search_seconds"] for r in records) / 60, 2)}


def pytorch_fastest(record: dict[str, Any]) -> dict[str, int] | None:
    """Of the workloads its latest composition assigned, how many went to the reference part
    (PyTorch eager: no kernel the search judged beat it there); None when no composition is
    recorded. Where that is every workload, the templates cannot express a faster kernel for the
    problem's shapes, whatever the search does."""
    assignment = (record.get("composite") or {}).get("assignment")
    if not assignment:
        return None
    reference = part_name(record["problem"].rsplit("/", 1)[-1])
    return {"shapes": sum(name == reference for name in assignment.values()),
            "of": len(assignment)}


def write_summary(call: Call, environment: dict[str, Any] | None = None) -> dict[str, Any]:
    records = with_compositions(call, [json.loads(line) for line in _lines(call.progress)])
    summary = {"what": "template search (solforge optimize --proposer templates) per problem",
               "date": datetime.date.today().isoformat(),
               "environment": environment or recorded_environment(call.device),
               "device": call.device, "budget_per_problem": call.budget,
               "patience": call.patience,
               "goal": goal(records), "problems": records}
    (call.out / f"{call.name}-forge.json").write_text(json.dumps(summary, indent=1) + "\n")
    (call.out / f"{call.name}-forge.md").write_text(markdown(summary))
    merge_goals(goals_path(call.out, call.name), goals_part(records, summary["goal"]))
    return summary


def goals_part(records: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    """The goals file's forge keys: problems searched, the best elites' median T_SOL / T_k
    over their workloads with T_SOL >= 10 us, and the per-problem medians of goal()."""
    times = [pair for r in records if r["best"] for pair in r["best"].get("workload_times", [])]
    numbers = result["numbers"]
    return {"forge": {"problems": numbers["problems"],
                      "median_fraction_of_sol": median_fraction_of_sol(times),
                      "s_vs_eager": numbers["s_vs_eager"], "s_vs_best": numbers["s_vs_best"],
                      "beats_compile_share": numbers["beats_compile_share"]}}


def markdown(summary: dict[str, Any]) -> str:
    env, result = summary["environment"], summary["goal"]
    lines = [f"# Template search per problem ({summary['date']})", "",
             f"{env['summary']}; device "
             f"{summary['device']}; up to {summary['budget_per_problem']} candidates per problem, "
             f"a search ending after {summary.get('patience') or '-'} without a gain; "
             f"{result['gpu_minutes']} minutes of search (GPU-minutes on a GPU); "
             f"{result['numbers'].get('converged', 0)} of {result['numbers']['problems']} "
             "problems converged.", "",
             "| goal | measured | target | met |", "|---|---|---|---|"]
    for key, target in result["targets"].items():
        lines.append(f"| {key} | {fmt(result['numbers'][key])} | {target} | "
                     f"{'yes' if result['met'][key] else 'no'} |")
    lines += ["", "| problem | judged | converged | best cell | S vs best | S vs eager | "
              "T_SOL/T_k | vs compile | bound |", "|---|---|---|---|---|---|---|---|---|"]
    for record in summary["problems"]:
        best = record["best"] or {}
        converged = "yes" if record.get("converged") else "no"
        lines.append(f"| {record['problem']} | {record['judged']} | {converged} | "
                     f"{best.get('cell', '-')} | "
                     f"{fmt(best.get('s_vs_best'))} | {fmt(best.get('s_vs_eager'))} | "
                     f"{fmt(best.get('fraction_of_sol'))} | "
                     f"{fmt(best.get('speedup_over_compile'))} | "
                     f"{best.get('binding_bound') or '-'} |")
    lines += ["", f"Stalled (below {GOAL['fraction_of_sol']} of the speed of light): "
              f"{len(result['stalls'])}"]
    for stall in result["stalls"]:
        pytorch = stall.get("pytorch_fastest")
        lines.append(f"- {stall['problem']}: T_SOL/T_k {fmt(stall['fraction_of_sol'])}, "
                     f"bound {stall['binding_bound'] or '-'}, cells {', '.join(stall['cells'])}"
                     f", statuses {stall['statuses']}"
                     + (f"; PyTorch the fastest on {pytorch['shapes']} of {pytorch['of']} "
                        "workloads" if pytorch else ""))
    return "\n".join(lines) + "\n"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line] if path.is_file() else []


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None





def rewrite_tables(args: argparse.Namespace) -> None:
    """--tables-only: NAME-forge.{json,md} and the goals file again from what OUTDIR holds,
    with no GPU (after the summary's code changed), the environment of the machine that
    measured kept from the NAME-forge.json there."""
    name = args.name or ("h200" if args.device == "cuda" else "cpu")
    earlier = args.out / f"{name}-forge.json"
    if not earlier.is_file():
        sys.exit(f"--tables-only: {earlier} not found (nothing recorded to write again)")
    recorded = json.loads(earlier.read_text())
    call = Call(args.out.resolve(), args.problems or [], recorded["budget_per_problem"],
                0.0, recorded["device"], name, recorded.get("patience"))
    summary = write_summary(call, recorded["environment"])
    log(f"goal: {summary['goal']['numbers']} met: {summary['goal']['met']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--count", type=int, default=None,
                        help="problems when none are given (default: every one)")
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--patience", type=int, default=8,
                        help="candidates without a gain that end a search (0: none)")
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--name", default=None, help="files' prefix (default: h200, or cpu)")
    parser.add_argument("--compose", action="store_true",
                        help="add a per-shape composite to the problems already finished "
                             "instead of searching")
    parser.add_argument("--seeds", action="store_true",
                        help="with --compose: first judge each template's seeds that the "
                             "archive lacks")
    parser.add_argument("--again", nargs="+", default=[], metavar="TEXT",
                        help="search again the finished problems whose address has a TEXT")
    parser.add_argument("--per-gpu", type=int, default=1,
                        help="candidates sharing the GPU, their timed calls one at a time")
    parser.add_argument("--tables-only", action="store_true",
                        help="search nothing: write the summary files again from the "
                             "progress and compose files, keeping the recorded environment")
    args = parser.parse_args()
    if args.seeds and not args.compose:
        parser.error("--seeds goes with --compose (a search tries the seeds first anyway)")
    if args.again and args.compose:
        parser.error("--again searches: it does not go with --compose")
    started = time.monotonic()
    if args.tables_only:
        rewrite_tables(args)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA GPU: run on the H200, or pass --device cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("h200" if args.device == "cuda" else "cpu")
    call = Call(args.out.resolve(), args.problems or default_problems(args.count), args.budget,
                args.deadline_s, args.device, name, args.patience or None, args.compose,
                args.seeds, tuple(args.again), args.per_gpu)
    if call.compose:
        compose_until_deadline(call, started)
    else:
        search_until_deadline(call, started)
    summary = write_summary(call)
    log(f"goal: {summary['goal']['numbers']} met: {summary['goal']['met']}")


if __name__ == "__main__":
    try:
        main()
    except SolforgeError as exc:  # a bad target or problem: its message, not a traceback
        sys.exit(f"{Path(__file__).name}: {exc}")
