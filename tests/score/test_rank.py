"""One ranking convention (solforge.score.rank): its order, and bench and report naming the same
best solution from the same store."""

from __future__ import annotations

import pytest

from solforge.bench.results import read_results
from solforge.bench.run import BenchOutcome, StoredProblem
from solforge.bench.summary import best_solution
from solforge.data.trace import (
    BaselineReport,
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
)
from solforge.hardware import load_profile
from solforge.problem.suite import open_problem
from solforge.report import gather
from solforge.report.tables import problem_summaries
from solforge.score.rank import Rating, best, ranked_best_first, rate
from solforge.solar import analyze_workload

GPU = "NVIDIA_H200"
ADDRESS = "l1/rmsnorm_llama3_1_8b"
# Times as multiples of each workload's T_SOL; T_b = compile, the faster baseline.
EAGER, COMPILE = 4.0, 2.5
# "spiky" is near the bound on two workloads and fails the third: mean S 0.571, median 0.857.
# "steady" passes all three at 1.8 T_SOL: S 0.652 each. A median would pick spiky, the mean
# (the convention) picks steady.
TIMES = {"spiky": (None, 1.25, 1.25), "steady": (1.8, 1.8, 1.8)}


def test_ratings_order_score_then_passed_then_speedup():
    unscored = Rating(None, 3, 9.0)
    ratings = [unscored, Rating(0.6, 2, 1.0), Rating(0.6, 3, 1.0), Rating(0.6, 3, 2.0),
               Rating(0.7, 1, 0.5)]
    assert ranked_best_first(ratings, lambda r: r) == ratings[::-1]
    assert best([], lambda r: r) is None


def test_a_failed_workload_counts_zero_in_the_mean():
    rating = rate([0.0, 0.9, 0.9], passed=2, speedups=[2.0, 8.0])
    assert rating.sol_score == pytest.approx(0.6) and rating.speedup == pytest.approx(4.0)
    assert rate([], passed=0, speedups=[]) == Rating(None, 0, None)


def _trace(problem: str, uuid: str, name: str, latency_ms: float | None, sol: float) -> dict:
    status = Status.PASSED if latency_ms is not None else Status.INCORRECT_NUMERICAL
    eager, compiled = EAGER * sol, COMPILE * sol
    evaluation = Evaluation(
        status=status, environment=Environment(GPU, {"torch": "2.11.0"}),
        timestamp="2026-12-01T12:00:00Z", correctness=Correctness(),
        performance=Performance(latency_ms, compiled, compiled / latency_ms)
        if latency_ms is not None else None,
        t_sol_ms=sol, sol_hardware=load_profile("H200").name,
        baseline=BaselineReport("compile", compiled, eager, compiled))
    return Trace(problem, name, {"uuid": uuid}, evaluation).to_dict()


@pytest.mark.slow
def test_bench_and_report_name_the_same_best_solution(tmp_path):
    from solforge.store import Store

    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    profile = load_profile("H200")
    problem = open_problem(ADDRESS)
    run = store.begin_run("solforge bench", "cuda", profile.name, {"gpu": "NVIDIA H200"})
    problem_id = store.problem_id(ADDRESS, problem, "l1")
    names = ("reference:eager", "reference:compile", *TIMES)
    ids = {name: store.solution_id({"name": name, "definition": problem.name, "author": "t",
                                    "spec": {"languages": ["triton"]},
                                    "sources": [{"path": "k.py", "content": name}]})
           for name in names}
    workload_ids = {}
    smallest = sorted(problem.workloads, key=problem.input_elements)[:3]
    for index, workload in enumerate(smallest):
        workload_id = store.workload_id(problem_id, workload, problem.axes(workload))
        workload_ids[workload.uuid] = workload_id
        analysis = analyze_workload(problem, workload, profile)
        store.save_analysis(workload_id, analysis.to_json())
        sol = analysis.t_sol_ms
        multiples = {"reference:eager": EAGER, "reference:compile": COMPILE,
                     **{name: times[index] for name, times in TIMES.items()}}
        for name, multiple in multiples.items():
            latency = multiple * sol if multiple is not None else None
            store.save_trace(run, workload_id, ids[name], "cuda", GPU,
                             _trace(problem.name, workload.uuid, name, latency, sol))
    store.finish_run(run)

    stored = StoredProblem(ADDRESS, "l1", workload_ids, ids)
    outcome = BenchOutcome(run, "cuda", GPU, profile.name, (stored,), 0, 0, False, ())
    bench_best = best_solution(read_results(store, outcome)[0], "best", scored=True)
    report_best = problem_summaries(gather(store).results)[0].best
    assert bench_best is not None and report_best is not None
    assert bench_best.name == report_best.solution == "steady"
    assert bench_best.sol_score == pytest.approx(report_best.mean_score)
