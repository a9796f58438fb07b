"""The results store: identities, get-or-create and replace semantics, trace import checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_corpus import PROBLEMS

from solforge.data.trace import (
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
)
from solforge.problem import load_problem
from solforge.store import Store, StoreError, solution_hash
from solforge.store.schema import AnalysisRow, ProblemRow, Run, SolutionRow, TraceRow

SMALL = PROBLEMS / "rmsnorm_small"


def _store(tmp_path: Path, name: str = "store.db") -> Store:
    return Store(f"sqlite:///{tmp_path / name}")


def _solution(content: str = "def run(x): return x") -> dict:
    return {"name": "kernel", "definition": "rmsnorm_small", "author": "tests",
            "spec": {"languages": ["pytorch"], "entry_point": "kernel.py::run"},
            "sources": [{"path": "kernel.py", "content": content}]}


def _trace(latency_ms: float, hardware: str = "CPU_x86_64", solution: str = "kernel",
           definition: str = "rmsnorm_small", uuid: str = "small-t8") -> dict:
    evaluation = Evaluation(status=Status.PASSED, environment=Environment(hardware, {}),
                            timestamp="2026-11-29T00:00:00+00:00", correctness=Correctness(),
                            performance=Performance(latency_ms, 2 * latency_ms, 2.0))
    return Trace(definition, solution, {"uuid": uuid, "axes": {"num_tokens": 8}},
                 evaluation).to_dict()


def _ids(store: Store) -> tuple[int, int]:
    problem = load_problem(SMALL)
    problem_id = store.problem_id(str(SMALL), problem, None)
    workload = problem.workloads[0]
    return problem_id, store.workload_id(problem_id, workload, problem.axes(workload))


def test_solution_hash_is_canonical_and_content_sensitive():
    reordered = dict(reversed(list(_solution().items())))
    assert solution_hash(reordered) == solution_hash(_solution())
    assert solution_hash(_solution("def run(x): return x + 0")) != solution_hash(_solution())


def test_rows_are_created_once(tmp_path):
    store = _store(tmp_path)
    assert _ids(store) == _ids(store)
    first = store.solution_id(_solution())
    assert store.solution_id(_solution()) == first
    assert store.solution_id(_solution("def run(x): return x.clone()")) != first
    assert len(store.rows(ProblemRow)) == 1 and len(store.rows(SolutionRow)) == 2


def test_a_trace_replaces_the_one_with_the_same_key(tmp_path):
    store = _store(tmp_path)
    _, workload_id = _ids(store)
    solution_id = store.solution_id(_solution())
    assert not store.has_trace(workload_id, solution_id, "cpu", "CPU_x86_64")
    assert not store.has_traces()
    store.save_trace(None, workload_id, solution_id, "cpu", "CPU_x86_64", _trace(1.0))
    assert store.has_traces()
    store.save_trace(None, workload_id, solution_id, "cpu", "CPU_x86_64", _trace(3.0))
    store.save_trace(None, workload_id, solution_id, "cuda", "NVIDIA_H200", _trace(0.5))
    assert store.has_trace(workload_id, solution_id, "cpu", "CPU_x86_64")
    rows = store.find_traces([workload_id], [solution_id], "cpu", "CPU_x86_64")
    assert [row.latency_ms for row in rows] == [3.0]
    assert len(store.rows(TraceRow)) == 2


def test_an_analysis_is_kept_per_profile_and_replaced(tmp_path):
    store = _store(tmp_path)
    _, workload_id = _ids(store)
    analysis = {"hardware": "H200-SXM", "fp32_policy": "tf32", "t_sol_ms": 1.0,
                "bound": "memory", "flops": {"simt.fp32": 10.0}, "bytes_fused": 100.0}
    store.save_analysis(workload_id, analysis)
    store.save_analysis(workload_id, {**analysis, "t_sol_ms": 2.0})
    store.save_analysis(workload_id, {**analysis, "hardware": "B200"})
    assert store.has_analysis(workload_id, "H200-SXM", "tf32")
    assert not store.has_analysis(workload_id, "H200-SXM", "simt")
    assert store.t_sol_ms([workload_id], "H200-SXM", "tf32") == {workload_id: 2.0}
    assert len(store.rows(AnalysisRow)) == 2


def test_finishing_a_run_adds_what_was_seen(tmp_path):
    store = _store(tmp_path)
    run_id = store.begin_run("solforge bench", "cuda", "H200", {"driver": "580"})
    store.finish_run(run_id, "interrupted", {"clocks_seen_mhz": {"sm": [1980, 1980]}})
    run = store.rows(Run)[0]
    assert run.status == "interrupted" and run.finished_at is not None
    assert run.environment == {"driver": "580", "clocks_seen_mhz": {"sm": [1980, 1980]}}


def test_import_files_traces_under_known_rows(tmp_path):
    store = _store(tmp_path)
    _, workload_id = _ids(store)
    solution_id = store.solution_id(_solution())
    lines = [_trace(1.0), _trace(0.5, hardware="NVIDIA_H200"),
             _trace(2.0, solution="other", definition="rmsnorm_llama3_1_8b", uuid="x")]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert store.import_traces(path) == 3
    rows = store.rows(TraceRow)
    assert [(r.workload_id, r.solution_id, r.device) for r in rows[:2]] == [
        (workload_id, solution_id, "cpu"), (workload_id, solution_id, "cuda")]
    bundled = [p for p in store.rows(ProblemRow) if p.name == "rmsnorm_llama3_1_8b"]
    assert [(p.address, p.tier) for p in bundled] == [("l1/rmsnorm_llama3_1_8b", "l1")]
    assert store.import_traces(path) == 3  # the same traces again replace themselves
    assert len(store.rows(TraceRow)) == 3


@pytest.mark.parametrize(("content", "message"), [
    ('{"definition": "x"', "traces.jsonl:2: invalid JSON"),
    ('{"definition": "x", "workload": {}}', "traces.jsonl:2: not a trace record"),
])
def test_import_rejects_a_bad_file_before_writing(tmp_path, content, message):
    store = _store(tmp_path)
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(_trace(1.0)) + "\n" + content + "\n")
    with pytest.raises(StoreError, match=message):
        store.import_traces(path)
    assert store.rows(TraceRow) == []
    with pytest.raises(StoreError, match="no such file"):
        store.import_traces(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("url", ["nosuchdialect://x", "sqlite:////no/such/folder/x.db"])
def test_a_bad_url_is_a_store_error(url):
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(url)
