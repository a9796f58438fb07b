"""The GPU benchmark scripts kept working without a GPU: each runs here in CPU mode on a small
target, writes its files, resumes from the store, and stops for its deadline."""

from __future__ import annotations

import json
import runpy
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solforge.harness import dict_watch

REPO = Path(__file__).resolve().parents[2]
SUITE_SCRIPT = REPO / "benchmarks" / "suite_gpu.py"
PROBLEM = "l1/rmsnorm_llama3_1_8b"  # has a shipped solution


def _run(script: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _load_script(path: Path, monkeypatch: pytest.MonkeyPatch):
    """A benchmark script as a module, registered in sys.modules (its dataclasses look it up
    there) for the test's length."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    return script


@pytest.fixture
def run_here(monkeypatch, capsys):
    """A later call of a script, run as its command line runs it (`__main__`) but in this
    process, without a fresh interpreter's seconds of importing torch and solforge: what it
    printed and the status a process would exit with (`sys.exit(message)`: the message on
    stderr, status 1; any other exception fails the test with its traceback)."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))  # a script puts src/ and benchmarks/ first

    def run(script: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        capsys.readouterr()
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        if isinstance(code, str):
            err, code = f"{err}{code}\n", 1
        done = subprocess.CompletedProcess([script.name, *args], code or 0, out, err)
        if check:
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    return run


@pytest.mark.slow
def test_suite_script_benches_records_resumes_and_keeps_its_deadline(tmp_path, run_here,
                                                                     monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))  # no baseline stored yet
    first = _run(SUITE_SCRIPT, str(tmp_path), PROBLEM, "--device", "cpu")
    assert f"[1/1] {PROBLEM}: 2 measured, 0 already stored" in first.stdout
    ended = first.stdout.count(": done on ") + first.stdout.count("from the baseline store")
    assert ended == 2  # a line per unit: its seconds, or that the baseline store had it
    phases = json.loads((tmp_path / "cpu-suite-phases.json").read_text())
    assert phases and all(e["seconds"] >= 0 and e["count"] >= 1 for e in phases.values())
    summary = json.loads((tmp_path / "cpu-suite.json").read_text())
    (record,) = summary["problems"]
    assert record["problem"] == PROBLEM and record["eager_ms"] > 0 and record["t_sol_ms"] > 0
    (solution,) = record["solutions"]
    assert solution["shipped"] and solution["passed"] == solution["workloads"] == 1
    assert summary["goal"]["shipped_solutions"] == 1
    assert "| l1 | 1 | 1 |" in (tmp_path / "cpu-suite.md").read_text()
    assert PROBLEM in (tmp_path / "cpu-suite-report.html").read_text()
    assert solution["reach"] is None and record["launch_bound_workloads"] is None  # CPU
    (t_sol, t_k), = solution["workload_times"]
    assert t_sol == record["t_sol_ms"] and t_k > 0
    goals = json.loads((tmp_path / "cpu-goals.json").read_text())
    assert goals["suite_problems"] == 1
    assert goals["shipped"]["problems"] == 1 and goals["shipped"]["median_fraction_of_sol"] is None

    (call,) = [json.loads(x) for x in (tmp_path / "cpu-suite-calls.jsonl").read_text().splitlines()]
    assert call["empty_before"] and call["units_left"] == 0 and call["measured"] == 2
    assert call["baseline_seconds"] > 0  # the baselines were timed: this store was not warm
    timed = json.loads((tmp_path / "cpu-suite-time.json").read_text())
    assert timed["complete"] and timed["from_an_empty_store"] and timed["calls"] == 1
    assert 0 < timed["baseline_seconds"] < timed["seconds"] == call["seconds"]
    assert timed["minutes"] == round(call["seconds"] / 60, 3)

    again = run_here(SUITE_SCRIPT, str(tmp_path), PROBLEM, "--device", "cpu")
    assert f"[1/1] {PROBLEM}: 0 measured, 2 already stored" in again.stdout
    assert json.loads((tmp_path / "cpu-suite-time.json").read_text()) == timed  # no work: no call

    # Warm: a new results store, the baselines kept; the baseline unit times nothing.
    run_here(SUITE_SCRIPT, str(tmp_path / "warm"), PROBLEM, "--device", "cpu")
    warm = json.loads((tmp_path / "warm" / "cpu-suite-time.json").read_text())
    assert warm["complete"] and warm["from_an_empty_store"] and warm["measured"] == 2
    assert warm["baseline_seconds"] == 0 and warm["seconds"] > 0

    # --tables-only: the files again from the store as edited, the recorded environment kept
    measured_on = {**summary["environment"], "summary": "the machine that measured"}
    summary["environment"] = measured_on
    (tmp_path / "cpu-suite.json").write_text(json.dumps(summary))
    with sqlite3.connect(tmp_path / "suite.db") as db:
        db.execute("DELETE FROM traces WHERE solution_id IN (SELECT id FROM solutions "
                   "WHERE name NOT LIKE 'reference:%')")
    tables = run_here(SUITE_SCRIPT, str(tmp_path), PROBLEM, "--device", "cpu", "--tables-only")
    assert "measured" not in tables.stdout
    rewritten = json.loads((tmp_path / "cpu-suite.json").read_text())
    assert rewritten["environment"] == measured_on
    (kept,) = rewritten["problems"]
    assert kept["eager_ms"] == record["eager_ms"]
    assert rewritten["goal"]["shipped_solutions"] == 0

    late = run_here(SUITE_SCRIPT, str(tmp_path / "late"), PROBLEM, "l1/add_rmsnorm_llama3_1_8b",
                    "--device", "cpu", "--deadline-s", "1", "--chunk", "2")
    (line,) = [x for x in late.stdout.splitlines() if "stopping before" in x]
    assert PROBLEM in line and "l1/add_rmsnorm_llama3_1_8b" in line  # one run of two
    assert json.loads((tmp_path / "late" / "cpu-suite.json").read_text())["problems"] == []
    assert not (tmp_path / "late" / "cpu-suite-calls.jsonl").exists()


FORGE_SCRIPT = REPO / "benchmarks" / "forge_gpu.py"


@pytest.mark.slow
def test_forge_script_searches_records_resumes_and_reports_the_goal(tmp_path, run_here):
    first = _run(FORGE_SCRIPT, str(tmp_path), PROBLEM, "--budget", "2", "--device", "cpu")
    assert f"[1/1] {PROBLEM}: 2 judged" in first.stdout
    summary = json.loads((tmp_path / "cpu-forge.json").read_text())
    (record,) = summary["problems"]
    assert record["judged"] == 2 and sum(record["statuses"].values()) == 2
    assert record["converged"] is False  # the budget of 2 ended the search, not a stall
    best = record["best"]
    assert best["passed"] == best["workloads"] == 1 and best["binding_bound"] == "memory"
    assert best["fraction_of_sol"] is None and best["s_vs_eager"] is None  # CPU: not priced
    numbers = summary["goal"]["numbers"]
    assert numbers["problems"] == 1 and numbers["with_a_correct_kernel"] == 1
    assert summary["goal"]["met"]["problems"] is False  # 1 of the 20 the goal asks
    assert "| l1/rmsnorm_llama3_1_8b | 2 |" in (tmp_path / "cpu-forge.md").read_text()
    goals = json.loads((tmp_path / "cpu-goals.json").read_text())
    assert goals["forge"]["problems"] == 1 and goals["forge"]["median_fraction_of_sol"] is None

    again = run_here(FORGE_SCRIPT, str(tmp_path), PROBLEM, "--budget", "2", "--device", "cpu")
    assert "judged" not in again.stdout  # the problem is done: nothing searched again
    assert len((tmp_path / "cpu-forge.jsonl").read_text().splitlines()) == 1  # done: skipped

    # --tables-only: the summary written again, the measuring machine's environment kept
    summary["environment"] = {**summary["environment"], "summary": "the machine that measured"}
    (tmp_path / "cpu-forge.json").write_text(json.dumps(summary))
    run_here(FORGE_SCRIPT, str(tmp_path), "--device", "cpu", "--tables-only")
    rewritten = json.loads((tmp_path / "cpu-forge.json").read_text())
    assert rewritten["environment"] == summary["environment"]
    assert rewritten["problems"] == summary["problems"]
    assert "the machine that measured" in (tmp_path / "cpu-forge.md").read_text()
    missing = run_here(FORGE_SCRIPT, str(tmp_path / "none"), "--device", "cpu", "--tables-only",
                       check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_a_stall_says_on_how_many_workloads_pytorch_was_the_fastest(monkeypatch):
    script = _load_script(FORGE_SCRIPT, monkeypatch)
    composed = {"problem": "l1/gemm_llama3_1_8b_down", "composite": {"assignment": {
        "a": "gemm_llama3_1_8b_down-reference", "b": "gemm_llama3_1_8b_down-reference",
        "c": "gemm_llama3_1_8b_down-gemm-block_m64"}}}
    assert script.pytorch_fastest(composed) == {"shapes": 2, "of": 3}
    assert script.pytorch_fastest({"problem": "l1/x", "composite": None}) is None
    best = {"fraction_of_sol": 0.4, "binding_bound": "memory"}
    record = {**composed, "best": best, "cells": ["c"], "statuses": {"PASSED": 3},
              "search_seconds": 1.0}
    (stall,) = script.goal([record])["stalls"]
    assert stall["pytorch_fastest"] == {"shapes": 2, "of": 3}


def test_the_forge_goal_run_takes_every_problem_a_template_solves(monkeypatch):
    """Every L1/L2 problem a template applies to, not a prefix of the suite: the first 24 in
    suite order held 9 of the 12 GEMMs among their first 20."""
    from solforge.forge.templates import templates_for
    from solforge.problem.suite import bundled_problem_dirs, open_problem, tier_of

    script = _load_script(FORGE_SCRIPT, monkeypatch)
    every = script.default_problems()
    expected = [f"{tier_of(f)}/{f.name}" for f in bundled_problem_dirs()
                if tier_of(f) in ("l1", "l2") and templates_for(open_problem(f).definition)]
    assert every == expected and len(every) > 24
    assert "l1/swiglu_qwen3_32b" in every and "l1/rmsnorm_llama3_1_8b" in every
    assert script.default_problems(3) == every[:3]


def test_a_forge_search_cut_by_the_deadline_goes_on_in_the_next_call(tmp_path, monkeypatch):
    """A search gets the call's time left less the margins; the deadline cutting it is noted,
    not recorded as done, and the next call goes on with the rest of its budget and reports
    both calls' candidates and seconds. Too little time left starts no search."""
    from contextlib import nullcontext

    from solforge.forge.loop import SearchOutcome

    script = _load_script(FORGE_SCRIPT, monkeypatch)
    given, outcomes = [], [SearchOutcome(4, 0, 0, None, [], out_of_time=True),
                           SearchOutcome(6, 4, 0, None, [])]

    class Scripted:
        def __init__(self, problem, store, config, report, runner, address):
            given.append(config)

        def run(self):
            return outcomes[len(given) - 1]

    monkeypatch.setattr(script, "Optimizer", Scripted)
    monkeypatch.setattr(script, "open_runner", lambda *args, **options: nullcontext())
    call = script.Call(tmp_path, [PROBLEM], 10, 1000.0, "cpu", "cpu")
    script.search_until_deadline(call, time.monotonic())
    assert not call.progress.exists() and len(call.cuts.read_text().splitlines()) == 1
    assert given[0].budget == 10
    assert given[0].minutes * 60 == pytest.approx(1000 - script.MARGIN_S - script.FINAL_S, abs=5)

    script.search_until_deadline(call, time.monotonic())
    assert given[1].budget == 6  # the 4 judged before count against the budget
    (record,) = [json.loads(line) for line in call.progress.read_text().splitlines()]
    assert record["judged"] == 10 and record["calls"] == 2 and record["best"] is None

    short = script.Call(tmp_path / "short", ["l1/rmsnorm_qwen3_32b"], 10,
                        script.MARGIN_S + script.FINAL_S + script.MIN_SEARCH_S - 5, "cpu", "cpu")
    short.out.mkdir()
    script.search_until_deadline(short, time.monotonic())
    assert len(given) == 2 and not short.progress.exists()


NOTHING_TO_COMPOSE = "one candidate is the fastest on every workload shape"


def scripted_composer(script, monkeypatch, compositions: list) -> list:
    """The script's Optimizer replaced: the n-th made (its config kept in the list returned)
    recomposes to `compositions[n]`, None standing for a cut; the runner opens nothing."""
    from contextlib import nullcontext

    from solforge.forge.compose import Composition

    given = []

    class Scripted:
        rejudged, seeds_judged = 2, 0

        def __init__(self, problem, store, config, report, runner, address):
            given.append(config)

        def recompose(self, seeds=False):
            assert not seeds  # the call's default: no --seeds
            reason = compositions[len(given) - 1]
            return None if reason is None else Composition(None, {}, None, reason)

    monkeypatch.setattr(script, "Optimizer", Scripted)
    monkeypatch.setattr(script, "open_runner", lambda *args, **options: nullcontext())
    return given


def test_forge_compose_adds_a_composite_to_finished_problems_once(tmp_path, monkeypatch):
    """`--compose` composes the problems an earlier call finished, each once; one the deadline
    cuts is composed by the next call; the summary's records gain `composite` (and keep every
    key they had), and records of problems never composed are unchanged."""
    script = _load_script(FORGE_SCRIPT, monkeypatch)
    given = scripted_composer(script, monkeypatch, [None, NOTHING_TO_COMPOSE])
    call = script.Call(tmp_path, [PROBLEM], 10, 1000.0, "cpu", "cpu", compose=True)
    record = {"problem": PROBLEM, "judged": 3, "best": None}
    other = {"problem": "l1/not_given", "judged": 3, "best": None}  # finished, not asked for
    call.progress.write_text(json.dumps(record) + "\n" + json.dumps(other) + "\n")
    assert script.with_compositions(call, [record]) == [record]
    script.compose_until_deadline(call, time.monotonic())  # cut: nothing noted
    assert not call.composed.exists() and given[0].budget is None
    script.compose_until_deadline(call, time.monotonic())
    script.compose_until_deadline(call, time.monotonic())  # done: not composed again
    assert len(given) == 2 and len(call.composed.read_text().splitlines()) == 1
    (merged,) = script.with_compositions(call, [record])
    assert merged["composite"]["rejudged"] == 2 and merged["composite"]["composite"] is None
    assert {k: v for k, v in merged.items() if k != "composite"} == record


def test_forge_compose_composes_again_what_the_copying_reference_part_composed(tmp_path,
                                                                               monkeypatch):
    """A line written before the reference part returned its outputs is composed again, once;
    the summary keeps the best of the last composition that won, and the latest composite."""
    script = _load_script(FORGE_SCRIPT, monkeypatch)
    given = scripted_composer(script, monkeypatch, [NOTHING_TO_COMPOSE])
    call = script.Call(tmp_path, [PROBLEM], 10, 1000.0, "cpu", "cpu", compose=True)
    record = {"problem": PROBLEM, "judged": 3, "best": {"name": "searched"}}
    call.progress.write_text(json.dumps(record) + "\n")
    stale = {"problem": PROBLEM, "composite": "old", "best": {"name": "old composite"}}
    call.composed.write_text(json.dumps(stale) + "\n")
    script.compose_until_deadline(call, time.monotonic())
    script.compose_until_deadline(call, time.monotonic())  # composed again once, not twice
    assert len(given) == 1 and len(call.composed.read_text().splitlines()) == 2
    (merged,) = script.with_compositions(call, [record])
    assert merged["best"] == {"name": "old composite"}  # the new one did not replace it
    assert merged["composite"]["composite"] is None and merged["composite"]["reference_returns"]


@pytest.mark.slow
def test_a_bad_target_is_a_message_not_a_traceback(tmp_path, run_here):
    for script in (SUITE_SCRIPT, FORGE_SCRIPT):
        done = run_here(script, str(tmp_path), "l1/no_such_problem", "--device", "cpu",
                        check=False)
        assert done.returncode == 1
        assert f"{script.name}: l1/no_such_problem" in done.stderr
        assert "Traceback" not in done.stderr


THROUGHPUT_SCRIPT = REPO / "benchmarks" / "throughput_gpu.py"


@pytest.mark.slow
def test_throughput_script_measures_every_stage_and_resumes(tmp_path, run_here):
    args = (str(tmp_path), "--device", "cpu", "--name", "cpu", "--candidates", "2",
            "--problems", PROBLEM, "--before", "1", "--suite-sample", "1")
    _run(THROUGHPUT_SCRIPT, *args)
    record = json.loads((tmp_path / "cpu-throughput.json").read_text())
    assert record["complete"] and record["candidates"] == 2
    assert record["spares_per_slot"] == 1  # the CPU's default, SOLFORGE_SPARES_AHEAD unset
    assert record["gpu_seconds_per_candidate"] > 0 and record["suite_extrapolated"]
    assert record["suite_cold_minutes"] > 0 and record["suite_warm_minutes"] > 0
    for phase in ("worker_wait", "correctness", "timing", "unit_start"):
        assert phase in record["phases"], record["phases"]
    assert record["phases_before"]["worker_wait"] > 0
    for mode in ("cold", "warm"):  # where the suite sample's time went
        assert "timing" in record["suite"]["measured"][mode]["phases"], record["suite"]
    exported = json.loads((tmp_path / "cpu-baselines.json").read_text())
    assert exported["baselines"] and exported["format"] == "solforge-baselines/1"
    assert record["optimizer"]["problems_left"] == []
    # Racing (the default): the best candidate is timed again in full, one unit more, and the
    # rate is the mean over candidates, not over units
    optimizer = record["optimizer"]
    assert record["race"] and record["per_candidate_statistic"].endswith("gaps_mean")
    assert optimizer["timed_again_in_full"] >= 1
    assert optimizer["units"] == 2 + optimizer["timed_again_in_full"]
    again = run_here(THROUGHPUT_SCRIPT, *args)  # every stage and problem is in the state folder
    assert again.stdout.count("done in an earlier call") == 2  # before, suite
    assert f"{PROBLEM}: searched in an earlier call" in again.stdout
    assert json.loads((tmp_path / "cpu-throughput.json").read_text())["candidates"] == 2


def test_throughput_keeps_each_problem_and_goes_on_from_the_next(tmp_path, monkeypatch):
    """A problem searched in an earlier call is read back, not searched again, and the
    optimizer stage stays open (and the record incomplete) while a problem is left."""
    script = _load_script(THROUGHPUT_SCRIPT, monkeypatch)
    call = script.Call(tmp_path, tmp_path / "state", "cpu", "cpu", 4, ("l1/a", "l1/b"), 0, 0,
                       time.monotonic() + 600)
    call.state.mkdir()
    kept = {"problem": "l1/a", "candidates": 2, "wall_seconds": 10.0, "first_seconds": 6.0,
            "gaps": [4.0], "unit_seconds": [5.0, 4.0], "statuses": {"PASSED": 4},
            "phases": {"timing": {"seconds": 3.0, "count": 2},
                       "held:exclusive": {"seconds": 2.0, "count": 2},
                       "eager/held:exclusive": {"seconds": 1.0, "count": 1},
                       "held:shared": {"seconds": 0.5, "count": 2}}}
    script._problem_file(call, "forge.db", "l1/a").write_text(json.dumps(kept))
    so_far = script._so_far(call)
    assert so_far["candidates"] == 2 and so_far["problems_left"] == ["l1/b"]
    assert so_far["seconds_per_candidate_median"] == 4.0
    # the lock held alone by each candidate's unit, its baseline's loop included
    assert so_far["device_held_per_candidate"] == {"shared": 0.25, "exclusive": 1.5}
    record = script.write_record(call, None, so_far, None)
    assert not record["complete"] and record["candidates"] == 2


def test_units_sharing_the_gpu_are_counted_by_their_rate_not_their_median_gap(tmp_path,
                                                                               monkeypatch):
    """Units side by side end in bursts (gaps 0.1, 0.1, 5.8): the median gap (0.1) would say
    nothing of the rate, so with --per-gpu the record's figure is the mean gap (2.0); and so
    it is with racing, where a candidate may take two units."""
    script = _load_script(THROUGHPUT_SCRIPT, monkeypatch)
    kept = {"problem": "l1/a", "candidates": 4, "wall_seconds": 12.0, "first_seconds": 6.0,
            "gaps": [0.1, 0.1, 5.8], "unit_seconds": [6.0] * 4, "statuses": {"PASSED": 4},
            "phases": {"timing": {"seconds": 3.0, "count": 4}}}
    for per_gpu, race, expected in ((1, False, 0.1), (3, False, 2.0), (1, True, 2.0)):
        call = script.Call(tmp_path, tmp_path / f"state{per_gpu}{race}", "cuda", "h200", 4,
                           ("l1/a",), 0, 0, time.monotonic() + 600, per_gpu, race)
        call.state.mkdir()
        script._problem_file(call, "forge.db", "l1/a").write_text(json.dumps(kept))
        monkeypatch.setattr(script, "recorded_environment", lambda device: {})
        record = script.write_record(call, None, script._so_far(call), None)
        assert record["per_gpu"] == per_gpu
        assert record["gpu_seconds_per_candidate"] == pytest.approx(expected)
    run = subprocess.run([sys.executable, str(THROUGHPUT_SCRIPT), str(tmp_path), "--device",
                          "cpu", "--per-gpu", "2"], capture_output=True, text=True)
    assert run.returncode != 0 and "--per-gpu is for a GPU" in run.stderr


def test_sharing_fidelity_pairs_what_passed_in_both_runs(monkeypatch):
    """Only workloads that passed alone and shared are compared; the record's deviations are
    those of shared / alone."""
    from solforge.bench.results import Measured, ProblemResults

    script = _load_script(REPO / "benchmarks" / "sharing_fidelity.py", monkeypatch)

    def results(times: dict[str, float | None]) -> ProblemResults:
        outcomes = {uuid: Measured(ms is not None, ms) for uuid, ms in times.items()}
        return ProblemResults("l1/p", "l1", tuple(times), {}, {}, {"sol": outcomes})

    alone = results({"w1": 1.0, "w2": 2.0, "w3": 3.0, "w4": None})
    shared = results({"w1": 1.02, "w2": 1.9, "w3": None, "w4": 4.0})
    found = script.pairs([alone], [shared])
    assert [(p.workload, round(p.ratio, 3)) for p in found] == [("w1", 1.02), ("w2", 0.95)]
    told = script.summary(found)
    assert told["workloads"] == 2
    assert told["largest_abs_deviation"] == pytest.approx(0.05)
    assert told["largest_at"]["workload"] == "w2"
    assert script.summary([])["median_ratio"] is None


def test_a_suite_sample_without_the_time_for_it_is_not_started_nor_kept(tmp_path, monkeypatch):
    """A sample cut by the call's limit would record nothing: it is not started, no result is
    kept, and the next call starts it again."""
    script = _load_script(THROUGHPUT_SCRIPT, monkeypatch)
    call = script.Call(tmp_path, tmp_path / "state", "cpu", "cpu", 4, ("l1/a",), 0, 3,
                       time.monotonic() + 50)  # three problems need about 60 s, plus a margin
    call.state.mkdir()
    assert script.stage(call, "suite", lambda: script.suite(call),
                        finished=script._both_modes) is None
    assert not (call.state / "suite.json").exists()


EXAMPLES_SCRIPT = REPO / "benchmarks" / "examples_gpu.py"
EXAMPLES = REPO / "tests" / "fixtures" / "examples"


@pytest.mark.slow
def test_examples_script_judges_both_layouts_and_resumes(tmp_path, run_here):
    """A SOL-ExecBench example folder (reference.py beside the definition, value-returning
    solution) and a FlashInfer-Bench trace set (destination passing) are built and judged."""
    out = tmp_path / "examples.json"
    roots = [str(EXAMPLES / "sol-execbench"), str(EXAMPLES / "flashinfer-bench")]
    first = _run(EXAMPLES_SCRIPT, *roots, "--device", "cpu", "-o", str(out),
                 "--cache-dir", str(tmp_path / "cache"))
    assert "2 judged, 0 left" in first.stdout
    records = {r["example"]: r for r in json.loads(out.read_text())["examples"]}
    assert set(records) == {"sol-execbench/pytorch/rmsnorm_tiny/solution_python.json",
                            "flashinfer-bench/Tiny-Trace/solutions/rmsnorm_small_dps.json"}
    for record in records.values():
        assert record["status"] == "PASSED" and record["statuses"] == ["PASSED"]
        assert record["build_seconds"] == 0.0 and record["latency_ms"][0] > 0
    again = run_here(EXAMPLES_SCRIPT, *roots, "--device", "cpu", "-o", str(out))
    assert "judging" not in again.stdout  # resumed: nothing evaluated twice
    redo = run_here(EXAMPLES_SCRIPT, *roots, "--device", "cpu", "-o", str(out),
                    "--again", "Tiny-Trace")
    assert redo.stdout.count("judging") == 1 and "Tiny-Trace" in redo.stdout
    kept = {r["example"]: r for r in json.loads(out.read_text())["examples"]}
    assert set(kept) == set(records) and all(r["date"] for r in kept.values())


def test_examples_script_finds_both_layouts():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from examples_gpu import find_examples

    found = [e for root in ("sol-execbench", "flashinfer-bench")
             for e in find_examples(EXAMPLES / root)]
    assert [(e.key, e.trace_set, e.solution.languages) for e in found] == [
        ("sol-execbench/pytorch/rmsnorm_tiny/solution_python.json", False, ("pytorch",)),
        ("flashinfer-bench/Tiny-Trace/solutions/rmsnorm_small_dps.json", True, ("python",))]


def test_eval_phases_can_put_a_cold_run_without_compile_ahead_first(tmp_path, monkeypatch):
    """`--compile-ahead both`: a cold run with the torch.compile baseline not compiled ahead,
    in a cache of its own, then the cold and warm runs with it."""
    script = _load_script(REPO / "benchmarks" / "eval_phases.py", monkeypatch)
    configs = []

    def one_run(problem, solution, config):
        configs.append(config)
        return {"wall_seconds": 1.0, "phases": {}, "steps": [], "workloads": []}

    monkeypatch.setattr(script, "one_run", one_run)
    monkeypatch.setattr(script, "recorded_environment", lambda device: {})
    out = tmp_path / "phases.json"
    script.main(["l1/rmsnorm_llama3_1_8b",
                 str(REPO / "src/solforge/solutions/l1/rmsnorm_llama3_1_8b/triton_rmsnorm.json"),
                 "--device", "cpu", "--compile-ahead", "both", "--cache", str(tmp_path / "c"),
                 "-o", str(out)])
    assert [c.compile_ahead for c in configs] == [False, True, True]
    assert configs[0].cache_dir != configs[1].cache_dir == configs[2].cache_dir
    assert [r["compile_ahead"] for r in json.loads(out.read_text())["runs"]] == [False, True,
                                                                                  True]


def test_forge_again_forgets_the_finished_problems_it_names_and_searches_them(tmp_path,
                                                                              monkeypatch):
    """`--again TEXT` drops the progress, cut and compose lines of the problems whose address
    has TEXT (and only theirs), so the call searches them again; the others stay done."""
    from contextlib import nullcontext

    script = _load_script(FORGE_SCRIPT, monkeypatch)
    call = script.Call(tmp_path, ["l1/gelu_whisper_large_v3", "l1/rmsnorm_llama3_1_8b"], 10,
                       1000.0, "cpu", "cpu", again=("gelu",))
    lines = {path: [{"problem": p, "judged": 1, "best": None} for p in call.problems]
             for path in (call.progress, call.cuts, call.composed)}
    for path, records in lines.items():
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    searched = []
    monkeypatch.setattr(script, "open_store", lambda url: None)
    monkeypatch.setattr(script, "open_runner", lambda *args, **options: nullcontext())
    monkeypatch.setattr(script, "search_problem",
                        lambda call, store, address, runner, search_s: searched.append(address)
                        or {"problem": address, "judged": 2, "best": None, "converged": True,
                            "search_seconds": 1.0})
    script.search_until_deadline(call, time.monotonic())
    assert searched == ["l1/gelu_whisper_large_v3"]
    for path in (call.cuts, call.composed):
        assert [json.loads(line)["problem"] for line in path.read_text().splitlines()] == \
            ["l1/rmsnorm_llama3_1_8b"]
    progress = [json.loads(line) for line in call.progress.read_text().splitlines()]
    assert [(r["problem"], r["judged"]) for r in progress] == \
        [("l1/rmsnorm_llama3_1_8b", 1), ("l1/gelu_whisper_large_v3", 2)]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the GPU runs it")
def test_timer_cost_says_it_needs_a_gpu_and_writes_nothing(tmp_path, run_here):
    out = tmp_path / "timer-cost.json"
    done = run_here(REPO / "benchmarks" / "timer_cost.py", "-o", str(out), check=False)
    assert done.returncode == 1 and "needs a CUDA GPU" in done.stderr
    assert not out.exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the GPU runs it")
def test_first_call_profile_says_it_needs_a_gpu_and_writes_nothing(tmp_path, run_here):
    out = tmp_path / "first-calls.json"
    done = run_here(REPO / "benchmarks" / "first_call_profile.py", str(out), check=False)
    assert done.returncode == 1 and "needs a CUDA GPU" in done.stderr
    assert not out.exists()


def test_guard_cost_times_the_check_and_each_part_and_refuses_no_repeats(tmp_path, run_here):
    out = tmp_path / "guard-cost.json"
    run_here(REPO / "benchmarks" / "guard_cost.py", "--device", "cpu", "--repeats", "3",
             "-o", str(out))
    record = json.loads(out.read_text())
    parts = {"check", "per_timed_call", "identities", "identities_at_return", "hooks",
             "dispatch_dumps", "python_kernels", "audit", "threads", "poisoned_outputs"}
    assert set(record["ms_median"]) == parts and all(v > 0 for v in record["ms_median"].values())
    assert record["watched_ops"] > 20 and record["watched_names"] > 1000
    assert record["dict_watchers"] is dict_watch.available()
    done = run_here(REPO / "benchmarks" / "guard_cost.py", "--repeats", "0", check=False)
    assert done.returncode == 1 and "--repeats must be >= 1" in done.stderr


def test_compare_cost_times_every_workload_of_a_problem(tmp_path, run_here):
    """CPU mode times the same comparison on each workload's real outputs (no kernels to
    count there); a GPU call adds the kernels one comparison launches."""
    out = tmp_path / "compare-cost.json"
    run_here(REPO / "benchmarks" / "compare_cost.py", "--device", "cpu", "--repeats", "2",
             "l1/moe_topk_router_qwen3_30b_a3b", "-o", str(out))
    record = json.loads(out.read_text())
    from solforge.problem import open_problem

    problem = open_problem("l1/moe_topk_router_qwen3_30b_a3b")
    assert [r["workload"] for r in record["rows"]] == [w.uuid for w in problem.workloads]
    assert all(r["ms_median"] > 0 and r["kernels"] is None for r in record["rows"])
    assert record["environment"]["hardware"].startswith("CPU")
