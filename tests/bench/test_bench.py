"""`solforge bench` on the CPU: what it stores, resuming after a crash or Ctrl-C, the summary's
scores, trace export and import, and its errors. Only the small fixture problem is benched."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness_corpus import HONEST, PROBLEMS, short_limits
from typer.testing import CliRunner

from solforge.bench import BenchConfig, find_solutions, open_store, plan_problems, run_bench
from solforge.bench import run as bench_run
from solforge.bench.plan import BUNDLED_SOLUTIONS, CPU_MODE, default_folders, problem_folders
from solforge.bench.results import Measured, ProblemResults, read_results
from solforge.bench.run import SilentReporter
from solforge.bench.summary import best_solution, compile_line, problem_line, tier_line
from solforge.cli import app
from solforge.data.solution import solution_from_python
from solforge.data.trace import Trace
from solforge.errors import SolforgeError
from solforge.harness.evaluate import EvalConfig, evaluate_reference
from solforge.problem import load_problem
from solforge.problem.suite import bundled_problem_dirs
from solforge.score import sol_score
from solforge.store import StoreError
from solforge.store.schema import AnalysisRow, Run, TraceRow

SMALL = PROBLEMS / "rmsnorm_small"


@pytest.fixture
def solutions(tmp_path) -> Path:
    """The honest PyTorch RMSNorm as a solution JSON for rmsnorm_small, and a file that is not
    a solution."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    source = (HONEST / "pytorch_rmsnorm" / "solution.py").read_text()
    solution = solution_from_python(source, "honest_rmsnorm", "rmsnorm_small")
    (folder / "honest.json").write_text(json.dumps(solution.to_dict()))
    (folder / "notes.json").write_text("{}")
    return folder


def _bench(tmp_path: Path, solutions: Path, reporter=None, fresh: bool = False,
           db: str = "bench.db"):
    store = open_store(f"sqlite:///{tmp_path / db}")
    problems = plan_problems([str(SMALL)], find_solutions([solutions]), "cpu")
    config = BenchConfig(device="cpu", baseline="eager", fresh=fresh, limits=short_limits(),
                         cache_dir=tmp_path / "cache")
    return store, run_bench(problems, store, config, reporter)


class StopAfter(SilentReporter):
    """Raises `error` once `count` traces have been saved: a crash, or Ctrl-C."""

    def __init__(self, count: int, error: BaseException) -> None:
        self.count = count
        self.error = error

    def saved(self, trace: Trace) -> None:
        self.count -= 1
        if self.count == 0:
            raise self.error


# -- what to run -------------------------------------------------------------------------------

def test_solutions_are_matched_by_definition_and_bad_files_reported(solutions):
    (solutions / "copy").mkdir()
    (solutions / "copy" / "again.json").write_text((solutions / "honest.json").read_text())
    found = find_solutions([solutions])
    assert [s.name for s in found.by_definition["rmsnorm_small"]] == ["honest_rmsnorm"]
    assert any("again.json" in reason and "found first" in reason for reason in found.skipped)
    assert any("notes.json" in reason for reason in found.skipped)
    [planned] = plan_problems([str(SMALL)], found, "cpu")
    assert planned.tier is None and [s.name for s in planned.solutions] == ["honest_rmsnorm"]
    with pytest.raises(SolforgeError, match="no such folder"):
        find_solutions([solutions / "missing"])


def test_suites_and_addresses_name_each_problem_once():
    l1 = [folder.resolve() for folder in bundled_problem_dirs("l1")]
    assert problem_folders(["l1"]) == l1
    named = problem_folders(["l1/rmsnorm_llama3_1_8b", "l1", "rmsnorm_llama3_1_8b"])
    assert named[0].name == "rmsnorm_llama3_1_8b" and sorted(named) == sorted(l1)
    assert len(problem_folders(["all"])) == len(bundled_problem_dirs())


def test_the_cpu_default_is_the_problems_with_solutions(solutions):
    found = find_solutions([solutions])
    with pytest.raises(SolforgeError, match="no bundled problem has a solution"):
        default_folders(found, "cpu")
    assert default_folders(found, "cuda") == bundled_problem_dirs()
    bundled = find_solutions([BUNDLED_SOLUTIONS])
    assert bundled.skipped == ()
    names = [folder.name for folder in default_folders(bundled, "cpu")]
    assert sorted(names) == sorted(bundled.by_definition)


# -- the loop ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_bench_stores_everything_and_a_rerun_skips_it(tmp_path, solutions):
    store, outcome = _bench(tmp_path, solutions)
    assert (outcome.measured, outcome.skipped, outcome.interrupted) == (2, 0, False)
    # where the units' time went, summed over both (the suite's phase table on the GPU)
    assert {"unit_start", "worker_wait", "correctness", "timing"} <= set(outcome.phases)
    assert outcome.phases["correctness"]["count"] >= 1
    traces = {row.record["solution"]: row for row in store.rows(TraceRow)}
    assert set(traces) == {"reference:eager", "honest_rmsnorm"}
    assert all(row.status == "PASSED" and row.device == "cpu" for row in traces.values())
    assert traces["reference:eager"].latency_ms == traces["reference:eager"].eager_ms > 0
    candidate = traces["honest_rmsnorm"].record["evaluation"]
    assert candidate["baseline"]["cached"]  # T_b came from the reference:eager measurement
    assert candidate["baseline"]["latency_ms"] == traces["reference:eager"].latency_ms
    [analysis] = store.rows(AnalysisRow)
    assert analysis.hardware == outcome.profile and analysis.t_sol_ms > 0
    [run] = store.rows(Run)
    assert run.status == "finished" and "torch" in run.environment["libs"]

    again_store, again = _bench(tmp_path, solutions)
    assert (again.measured, again.skipped) == (0, 2)
    assert len(again_store.rows(TraceRow)) == 2
    [results] = read_results(again_store, again)
    assert results.solutions["honest_rmsnorm"][results.workloads[0]].passed
    line = problem_line(results, "eager", scored=False)
    assert line.best.name == "honest_rmsnorm" and line.best.sol_score is None
    assert line.eager_ms == (traces["reference:eager"].latency_ms,) and line.compile_ms == ()

    # A new results store on a warm machine: the baseline comes from the baseline store with
    # no unit process (only the solution's unit starts), the same trace as measured.
    assert outcome.phases["unit_start"]["count"] == 2
    warm_store, warm = _bench(tmp_path, solutions, db="warm.db")
    assert (warm.measured, warm.skipped, warm.failures) == (2, 0, ())
    assert warm.phases["unit_start"]["count"] == 1
    warm_traces = {row.record["solution"]: row for row in warm_store.rows(TraceRow)}
    assert warm_traces["reference:eager"].record == traces["reference:eager"].record
    assert warm_traces["honest_rmsnorm"].status == "PASSED"


@pytest.mark.slow
def test_a_crash_and_an_interrupt_keep_what_was_saved(tmp_path, solutions):
    with pytest.raises(RuntimeError, match="crash"):
        _bench(tmp_path, solutions, StopAfter(1, RuntimeError("crash")))
    store = open_store(f"sqlite:///{tmp_path / 'bench.db'}")
    assert [row.record["solution"] for row in store.rows(TraceRow)] == ["reference:eager"]

    store, interrupted = _bench(tmp_path, solutions, StopAfter(1, KeyboardInterrupt()))
    assert (interrupted.interrupted, interrupted.measured, interrupted.skipped) == (True, 1, 1)
    assert [run.status for run in store.rows(Run)] == ["failed", "interrupted"]
    assert len(store.rows(TraceRow)) == 2

    store, finished = _bench(tmp_path, solutions)
    assert (finished.measured, finished.skipped, finished.interrupted) == (0, 2, False)


@pytest.mark.gpu
def test_bench_on_a_gpu_times_both_baselines_and_scores(tmp_path, solutions):
    store = open_store(f"sqlite:///{tmp_path / 'bench.db'}")
    problems = plan_problems([str(SMALL)], find_solutions([solutions]), "cuda")
    outcome = run_bench(problems, store, BenchConfig(device="cuda", limits=short_limits(),
                                                     cache_dir=tmp_path / "cache"))
    assert (outcome.measured, outcome.interrupted) == (6, False)  # 3 roles x 2 workloads
    assert all(row.status == "PASSED" for row in store.rows(TraceRow))
    [run] = store.rows(Run)
    assert run.environment["gpu"] and "cuda" in run.environment["libs"]
    [results] = read_results(store, outcome)
    line = problem_line(results, "best", scored=True)
    assert len(line.t_sol_ms) == len(line.eager_ms) == len(line.compile_ms) == 2
    assert 0 < line.best.sol_score <= 1 and line.best.passed == 2
    compiled = compile_line(results, scored=True)
    assert compiled.sol_score is not None


def test_the_reference_alone_needs_a_known_kind():
    with pytest.raises(SolforgeError, match="unknown reference kind"):
        evaluate_reference(load_problem(SMALL), "jit", EvalConfig(device="cpu"))


# -- the summary's scores ----------------------------------------------------------------------

def _passed(latency_ms: float) -> Measured:
    return Measured(True, latency_ms)


def _results(tier: str = "l1") -> ProblemResults:
    """T_SOL 1 ms, eager 10 ms, torch.compile 5 ms; solution `fast` 2 ms and `slow` 4 ms on
    workload a, `slow` failing on b."""
    return ProblemResults(
        address=f"{tier}/problem", tier=tier, workloads=("a", "b"),
        t_sol_ms={"a": 1.0, "b": 1.0},
        references={"eager": {"a": _passed(10.0), "b": _passed(10.0)},
                    "compile": {"a": _passed(5.0), "b": _passed(5.0)}},
        solutions={"fast": {"a": _passed(2.0), "b": _passed(2.0)},
                   "slow": {"a": _passed(4.0), "b": Measured(False, None)}})


def test_scores_follow_the_baseline_and_count_failures_as_zero():
    results = _results()
    fast = best_solution(results, "best", scored=True)
    assert fast.name == "fast" and fast.passed == 2
    assert fast.sol_score == pytest.approx(sol_score(2.0, 5.0, 1.0))  # T_b: the faster, compile
    assert fast.speedup_eager == pytest.approx(5.0) and fast.speedup_compile == pytest.approx(2.5)
    slow_only = replace(results, solutions={"slow": results.solutions["slow"]})
    slow = best_solution(slow_only, "eager", scored=True)
    assert slow.sol_score == pytest.approx(sol_score(4.0, 10.0, 1.0) / 2)  # b failed: S = 0
    compiled = compile_line(results, scored=True)
    assert compiled.sol_score == pytest.approx(sol_score(5.0, 10.0, 1.0))  # against eager


def test_tier_medians_and_the_cpu_leave_scores_out():
    line = tier_line("l1", [_results(), _results()], "best", scored=True)
    assert line.sol_score == pytest.approx(sol_score(2.0, 5.0, 1.0))
    assert line.compile_sol_score == pytest.approx(sol_score(5.0, 10.0, 1.0))
    assert line.fraction_of_sol == pytest.approx(0.5)
    assert (line.problems, line.with_solutions, line.all_passed) == (2, 2, 2)
    cpu = tier_line("l1", [_results()], "eager", scored=False)
    assert (cpu.sol_score, cpu.compile_sol_score, cpu.fraction_of_sol) == (None, None, None)
    assert cpu.speedup_eager == pytest.approx(5.0)


# -- the commands ------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_bench_resumes_and_traces_round_trip(tmp_path, solutions, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    first_db, second_db = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    bench = ["bench", str(SMALL), "--device", "cpu", "--solutions", str(solutions),
             "--no-bundled", "--db", first_db]
    result = runner.invoke(app, bench)
    assert result.exit_code == 0, result.output
    assert CPU_MODE in " ".join(result.output.split())
    assert "honest_rmsnorm" in result.output and "2 traces measured" in result.output
    rerun = runner.invoke(app, bench)
    assert "0 traces measured, 2 already stored" in rerun.output

    exported, again = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert runner.invoke(app, ["export", "--db", first_db, "-o", str(exported)]).exit_code == 0
    imported = runner.invoke(app, ["import-traces", str(exported), "--db", second_db])
    assert "imported 2 traces" in imported.output
    assert runner.invoke(app, ["export", "--db", second_db, "-o", str(again)]).exit_code == 0
    assert again.read_text() == exported.read_text()


def test_cli_bench_rejects_bad_options_clearly(tmp_path):
    runner = CliRunner()
    bad_db = runner.invoke(app, ["bench", str(SMALL), "--device", "cpu", "--db", "nosuch://x"])
    assert isinstance(bad_db.exception, StoreError)
    assert "cannot open the store 'nosuch://x'" in str(bad_db.exception)
    for option, value in (("--runner", "slurm"), ("--baseline", "fastest"), ("--device", "tpu")):
        result = runner.invoke(app, ["bench", str(SMALL), option, value])
        assert isinstance(result.exception, SolforgeError), (option, result.exception)
        assert value in str(result.exception)


@dataclass(frozen=True)
class _QueuedUnit:
    problem: SimpleNamespace
    label: str
    kind: str | None

    def task(self, config: EvalConfig, key: str) -> str:
        return key


class _QueueRunner:
    """Records what is submitted, in the order a FIFO runner would start it."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.withdrawn: list[str] = []

    def submit(self, task: str, first: bool = False) -> None:
        self.queue.insert(0, task) if first else self.queue.append(task)


def test_a_problem_with_stored_baselines_queues_its_solutions_in_its_place(monkeypatch):
    """A problem whose baselines an earlier call measured starts its solutions where its
    baselines would have stood, not behind every other problem's baselines: a deadline would
    otherwise stop each call before them."""
    units = [_QueuedUnit(SimpleNamespace(address=address), label, kind)
             for address in ("l1/a", "l1/b", "l1/c")
             for label, kind in (("reference:eager", "eager"), (f"{address}:mine", None))]
    stored = {"l1/b"}
    monkeypatch.setattr(bench_run, "stored_baseline_traces",
                        lambda unit, config: [] if unit.problem.address in stored else None)
    runner = _QueueRunner()
    scheduler = bench_run.UnitScheduler(runner, EvalConfig(device="cpu"), SilentReporter())
    scheduler.start(units)
    assert runner.queue == ["l1/a:reference:eager", "l1/b:l1/b:mine", "l1/c:reference:eager"]
    assert scheduler.left() == 2  # l1/a's and l1/c's solutions wait for their baselines
