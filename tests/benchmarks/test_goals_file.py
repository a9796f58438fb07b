"""The goals file: the fraction of the speed of light over workloads (T_SOL >= 10 us, failures
as 0), the launch floor's reach, and the two scripts' keys merged into one file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from goals_file import median_fraction_of_sol, merge_goals  # noqa: E402

from solforge.report.tables import launch_bound, launch_floor_ms, reach  # noqa: E402


def test_fraction_skips_short_workloads_and_counts_failures_as_zero():
    times = [(0.005, 0.010),  # T_SOL 5 us: launch-bound, left out
             (0.020, 0.025),  # 0.8
             (0.100, 0.200),  # 0.5
             (0.050, None)]   # failed: 0
    assert median_fraction_of_sol(times) == pytest.approx(0.5)
    assert median_fraction_of_sol([(0.001, 0.002)]) is None
    assert median_fraction_of_sol([(0.020, 0.010)]) == 1.0  # never above the bound


def test_merge_keeps_the_other_scripts_keys(tmp_path):
    path = tmp_path / "h200-goals.json"
    merge_goals(path, {"suite_problems": 144, "shipped": {"problems": 30}})
    merge_goals(path, {"forge": {"problems": 20}})
    merge_goals(path, {"shipped": {"problems": 31}})
    assert json.loads(path.read_text()) == {"suite_problems": 144, "shipped": {"problems": 31},
                                            "forge": {"problems": 20}}


def test_reach_prices_launch_bound_workloads_against_the_floor():
    floor = 0.001
    assert reach(0.002, 0.0005, floor) == pytest.approx(0.5)  # T_SOL under the floor
    assert reach(0.040, 0.030, floor) == pytest.approx(0.75)  # T_SOL above it: T_SOL / T_k
    assert launch_bound(0.0005, floor) and not launch_bound(0.030, floor)


def test_the_recorded_h200_floor_reads_back(tmp_path):
    recorded = REPO / "benchmarks" / "results" / "h200-launch-floor-2026-12-01.json"
    assert launch_floor_ms(recorded) == pytest.approx(0.001056)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match=r"bad\.json: no launch floor"):
        launch_floor_ms(tmp_path / "bad.json")


def test_standings_carry_the_median_reach_on_a_gpu_only():
    from solforge.report.data import MeasuredWorkload, SolutionRun, WorkloadAnalysis
    from solforge.report.tables import standings

    def result(workload: str, t_sol_ms: float, t_k_ms: float, device: str) -> MeasuredWorkload:
        sol = WorkloadAnalysis("H200", "tf32", t_sol_ms, 1.0, {}, 1.0, "memory")
        kernel = SolutionRun("k", "solforge", "PASSED", t_k_ms)
        return MeasuredWorkload("l1/x", "l1", workload, device, "H200" if device == "cuda"
                                else "CPU_x86_64", sol, 2 * t_k_ms, 2 * t_k_ms, (kernel,))

    gpu = [result("a", 0.0005, 0.002, "cuda"), result("b", 0.030, 0.040, "cuda"),
           result("c", 0.050, 0.100, "cuda")]
    (row,) = standings(gpu, floor_ms=0.001)
    assert row.median_reach == pytest.approx(0.5)  # reaches 0.5, 0.75, 0.5
    assert standings(gpu)[0].median_reach is None  # no floor given
    (cpu,) = standings([result("a", 0.0005, 0.002, "cpu")], floor_ms=0.001)
    assert cpu.median_reach is None  # CPU timings are never priced


def test_suite_records_and_goals_on_gpu_results():
    """suite_gpu.py's GPU path (scored, with a launch floor) on hand-made store results."""
    import suite_gpu

    from solforge.bench.results import Measured, ProblemResults

    t_sol = {"a": 0.0005, "b": 0.020, "c": 0.100}  # ms; "a" is under the 1 us floor
    results = ProblemResults(
        "l1/x", "l1", tuple(t_sol), t_sol,
        {"eager": {w: Measured(True, 4 * t) for w, t in t_sol.items()},
         "compile": {w: Measured(True, 3 * t) for w, t in t_sol.items()}},
        {"shipped_kernel": {"a": Measured(True, 0.002), "b": Measured(True, 0.025),
                            "c": Measured(False, None)}})
    record = suite_gpu.problem_record(results, "best", True, {"shipped_kernel"}, floor_ms=0.001)
    assert record["launch_bound_workloads"] == 1
    (solution,) = record["solutions"]
    assert solution["reach"] == pytest.approx(0.65)  # median of 0.5 (floor) and 0.8
    goals = suite_gpu.goals_part([record], scored=True)
    assert goals["suite_problems"] == 1
    # "a" is left out (T_SOL < 10 us), "b" 0.8, "c" failed: 0 -> median 0.4
    assert goals["shipped"] == {"problems": 1, "median_fraction_of_sol": pytest.approx(0.4),
                                "faster_than_compile": 0}  # one workload failed
    summary = {"date": "d", "environment": {"summary": "H200"}, "device": "cuda",
               "baseline": "best", "launch_floor_ms": 0.001, "problems_benched": 1,
               "tiers": [], "goal": suite_gpu.goal([record]), "problems": [record]}
    assert "| l1/x | 0.02 | 1/3 |" in suite_gpu.markdown(summary)


def test_forge_goal_keys_pool_the_best_elites_workloads():
    import forge_gpu

    def record(problem: str, times: list, s_best: float, over_compile: float) -> dict:
        best = {"fraction_of_sol": None, "s_vs_best": s_best, "s_vs_eager": s_best + 0.2,
                "speedup_over_compile": over_compile, "binding_bound": "memory",
                "workload_times": times}
        return {"problem": problem, "best": best, "cells": [], "statuses": {},
                "search_seconds": 1.0}

    records = [record("l1/a", [[0.020, 0.025], [0.001, 0.002]], 0.7, 1.2),
               record("l1/b", [[0.050, 0.100], [0.040, 0.050]], 0.5, 0.9),
               {"problem": "l1/c", "best": None, "cells": [], "statuses": {},
                "search_seconds": 1.0}]
    part = forge_gpu.goals_part(records, forge_gpu.goal(records))["forge"]
    assert part["problems"] == 3
    assert part["median_fraction_of_sol"] == pytest.approx(0.8)  # 0.8, 0.5, 0.8
    assert part["s_vs_best"] == pytest.approx(0.6) and part["s_vs_eager"] == pytest.approx(0.8)
    assert part["beats_compile_share"] == pytest.approx(1 / 3)
