"""Per-shape composition: winners per workload from the store, a composite that dispatches each
workload shape to its winner (and any other shape to the fallback), the optimizer judging it,
and stores written before per-workload results were kept."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import TESTS
from sqlalchemy import create_engine, inspect

from solforge.data.dtypes import dtype_named
from solforge.data.solution import parse_solution
from solforge.data.trace import (
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
)
from solforge.forge import archive, loop
from solforge.forge.archive import Judged
from solforge.forge.compose import compose, key_positions
from solforge.forge.fitness import WorkloadResult
from solforge.forge.loop import OptimizeConfig, Optimizer
from solforge.forge.reference_part import reference_candidate
from solforge.harness.evaluate import EvalConfig
from solforge.problem import load_problem
from solforge.problem.reference import load_reference_module
from solforge.store import Store
from solforge.store.schema import Base, Candidate, CandidateWorkload

PROBLEM = TESTS / "fixtures" / "harness" / "rmsnorm_small"  # workloads small-t8, small-t64
CELL = "plain/cuda_core/tile_per_program/small"
FP4 = dtype_named("float4_e2m1")  # packed: two elements a byte


def sentinel(name: str, value: float) -> dict:
    """A destination-passing candidate that fills its output with `value`: which part ran
    shows in the output."""
    source = ("def run(hidden_states, norm_weight, eps, output):\n"
              f"    output.fill_({value})\n")
    return {"name": name, "definition": "rmsnorm_small", "author": "test",
            "spec": {"languages": ["pytorch"], "entry_point": "kernel.py::run",
                     "destination_passing_style": True},
            "sources": [{"path": "kernel.py", "content": source}]}


def add(store: Store, name: str, latencies: dict[str, float], fitness: float = 1.0,
        status: str = "PASSED", rows: str = "PASSED", proposer: str = "template:t") -> int:
    """A judged candidate and its per-workload rows, as the optimizer stores them."""
    record = archive.CandidateRecord(
        problem="rmsnorm_small", name=name, proposer=proposer,
        solution=sentinel(name, len(name)), status=status,
        fitness=fitness if status == "PASSED" else None, fitness_kind="speedup",
        latency_ms=1.0, cell=CELL, descriptor={"evidence": []}, evidence=None, params={})
    candidate_id = archive.add_candidate(store, record)
    archive.record_workloads(store, candidate_id, [
        WorkloadResult(uuid, rows, latency if rows == "PASSED" else None, None)
        for uuid, latency in latencies.items()])
    return candidate_id


def test_composition_picks_each_workloads_fastest_passed_candidate(tmp_path):
    """A hack and a failed candidate are faster and ignored; a candidate without a row on
    every workload is ignored; the fallback is the best fitness."""
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    add(store, "decode", {"small-t8": 1.0, "small-t64": 9.0}, fitness=0.8)
    add(store, "prefill", {"small-t8": 5.0, "small-t64": 2.0}, fitness=1.2)
    add(store, "middle", {"small-t8": 3.0, "small-t64": 3.0}, fitness=1.0)
    add(store, "hack", {"small-t8": 0.1, "small-t64": 0.1}, status="REWARD_HACK",
        rows="REWARD_HACK")
    add(store, "broken", {"small-t8": 0.2, "small-t64": 0.2}, status="INCORRECT_NUMERICAL",
        rows="INCORRECT_NUMERICAL")
    add(store, "partial", {"small-t64": 0.5}, fitness=5.0)  # judged on one workload only
    found = compose(problem, archive.passed(store, "rmsnorm_small"))
    assert {uuid: j.name for uuid, j in found.assignment.items()} == {
        "small-t8": "decode", "small-t64": "prefill"}
    assert found.fallback.name == "prefill"
    assert found.solution is not None and found.solution["name"].startswith(
        "rmsnorm_small-composite-")
    assert "small-t8 -> decode" in found.summary()

    again = compose(problem, archive.passed(store, "rmsnorm_small"))
    assert again.solution == found.solution  # same winners, same JSON: dedup by hash


def test_one_winner_everywhere_composes_nothing(tmp_path):
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    add(store, "fast", {"small-t8": 1.0, "small-t64": 1.0})
    add(store, "slow", {"small-t8": 2.0, "small-t64": 2.0})
    found = compose(problem, archive.passed(store, "rmsnorm_small"))
    assert found.solution is None and "one candidate" in found.reason
    assert compose(problem, []).solution is None


def load_entry(solution: dict, folder: Path, monkeypatch, module: str = "composite"):
    """The solution's `run` (a composite's by default), imported from its sources as the
    harness imports them."""
    parse_solution(solution).write_sources(folder)
    monkeypatch.syspath_prepend(str(folder))
    for name in [n for n in sys.modules if n == module or n.startswith("part_")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(module).run


def test_the_composite_dispatches_workload_shapes_to_winners_and_others_to_the_fallback(
        tmp_path, monkeypatch):
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    add(store, "d", {"small-t8": 1.0, "small-t64": 9.0}, fitness=0.8)  # fills 1.0
    add(store, "pp", {"small-t8": 5.0, "small-t64": 2.0}, fitness=0.9)  # fills 2.0
    add(store, "fff", {"small-t8": 6.0, "small-t64": 6.0}, fitness=1.5)  # fills 3.0: fallback
    found = compose(problem, archive.passed(store, "rmsnorm_small"))
    solution = parse_solution(found.solution)  # a valid solution
    assert solution.entry_point == "composite.py::run" and solution.destination_passing_style
    assert len(found.parts) == 3 and key_positions(problem.definition) == [
        ("num_tokens", 0, 0)]
    run = load_entry(found.solution, tmp_path / "src", monkeypatch)
    for tokens, expected in ((8, 1.0), (64, 2.0), (5, 3.0)):
        hidden = torch.randn(tokens, 256, dtype=torch.bfloat16)
        out = torch.zeros(tokens, 256, dtype=torch.bfloat16)
        run(hidden, torch.ones(256, dtype=torch.bfloat16), 1e-5, out)
        assert torch.all(out == expected), tokens


def fake_trace(solution: dict, uuid: str, latency_ms: float) -> Trace:
    """A PASSED trace on the CPU (no SOL score: the fitness is the speedup over 2 ms)."""
    evaluation = Evaluation(Status.PASSED, Environment("CPU_test"), "2026-01-01T00:00:00",
                            correctness=Correctness(),
                            performance=Performance(latency_ms, 2.0, 2.0 / latency_ms))
    return Trace("rmsnorm_small", solution["name"], {"uuid": uuid, "axes": {}}, evaluation)


def both_workloads(self, screen: bool = False) -> EvalConfig:
    """The optimizer's harness settings with both workloads judged (the CPU default: one)."""
    return EvalConfig(device="cpu", baseline="eager", smallest=2,
                      cache_dir=self.config.cache_dir, screen=screen)


def scripted(monkeypatch, latencies: list[tuple[float, float]], real_composite: bool,
             reference: tuple[float, float] = (9.0, 9.0)) -> list:
    """The harness replaced for the template candidates: the n-th judged gets the n-th
    (t8, t64) latencies, the reference part `reference` (by default slower than any); the
    composite is judged by the real harness when `real_composite`."""
    real = loop.evaluate
    judged: list[str] = []

    def evaluate(problem, solution, config):
        judged.append(solution.name)
        if "-composite-" in solution.name and real_composite:
            return real(problem, solution, config)
        ordinary = [name for name in judged if not name.endswith("-reference")]
        t8, t64 = (reference if solution.name.endswith("-reference")
                   else latencies[min(len(ordinary), len(latencies)) - 1])
        data = solution.to_dict()
        return [fake_trace(data, "small-t8", t8), fake_trace(data, "small-t64", t64)]

    monkeypatch.setattr(loop, "evaluate", evaluate)
    monkeypatch.setattr(Optimizer, "_eval_config", both_workloads)
    monkeypatch.setattr(Optimizer, "_describe", lambda self, solution: ({"evidence": []}, CELL))
    return judged


def optimize(tmp_path: Path, db: str = "forge.db", **changes):
    """`optimize` on the fixture problem on the CPU (budget 2; no racing: the script gives one
    timing a candidate): its store, its report lines and its outcome."""
    store = Store(f"sqlite:///{tmp_path / db}")
    lines: list[str] = []
    config = OptimizeConfig(**{"budget": 2, "device": "cpu", "baseline": "eager",
                               "cache_dir": tmp_path / "cache", "race": False, **changes})
    return store, lines, Optimizer(load_problem(PROBLEM), store, config, lines.append).run()


@pytest.mark.slow
def test_optimize_judges_a_composite_when_two_candidates_win_different_workloads(
        tmp_path, monkeypatch):
    """Two template settings (their timings scripted) each win one workload; the composite of
    their real kernels is judged by the harness (Triton's interpreter), PASSES, and is stored
    with its per-workload results in its fallback's cell."""
    judged = scripted(monkeypatch, [(1.0, 4.0), (2.0, 1.5)], real_composite=True)
    problem = load_problem(PROBLEM)
    store, lines, outcome = optimize(tmp_path)
    first, second, reference = judged[:3]
    assert reference == "rmsnorm_small-reference"  # a part too, slower on both: not chosen
    assert outcome.judged == 4 and "-composite-" in judged[3]
    assert any(f"small-t8 -> {first}; small-t64 -> {second}" in line for line in lines)
    [composite] = [c for c in archive.candidates(store, problem.name) if c.proposer == "compose"]
    assert composite.status == "PASSED", composite.evidence
    assert any(line.startswith(f"compose: {composite.name}: PASSED") for line in lines)
    assert composite.cell == CELL and "fallback" in composite.descriptor["evidence"][0]
    results = archive.workload_results(store, composite.id)
    assert {r.workload for r in results} == {"small-t8", "small-t64"}
    assert all(r.status == "PASSED" and r.latency_ms > 0 for r in results)


def test_compose_can_be_turned_off_and_one_winner_composes_nothing(tmp_path, monkeypatch):
    judged = scripted(monkeypatch, [(1.0, 1.0), (2.0, 2.0)], real_composite=False)
    _, lines, _ = optimize(tmp_path)
    assert len(judged) == 3 and any("nothing to compose" in line for line in lines)

    scripted(monkeypatch, [(1.0, 4.0), (2.0, 1.5)], real_composite=False)
    assert optimize(tmp_path, "off.db", compose=False)[2].judged == 2


def old_store(path: Path) -> str:
    """A store as written before per-workload results: no candidate_workloads table."""
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    Base.metadata.create_all(engine, tables=[t for t in Base.metadata.sorted_tables
                                             if t.name != "candidate_workloads"])
    engine.dispose()
    return url


def test_an_old_store_opens_gets_the_table_and_recomposes(tmp_path, monkeypatch):
    """Candidates judged before per-workload results were kept: `recompose` judges the best of
    each template again, keeps the results on the existing rows (no duplicate), composes and
    judges the composite; a second call judges nothing again."""
    url = old_store(tmp_path / "old.db")
    assert "candidate_workloads" not in inspect(create_engine(url)).get_table_names()
    store = Store(url)
    assert "candidate_workloads" in inspect(store.engine).get_table_names()
    decode = add(store, "decode", {}, fitness=0.9, proposer="template:split_k")
    prefill = add(store, "prefill", {}, fitness=1.1, proposer="template:tiled")
    problem = load_problem(PROBLEM)
    assert compose(problem, archive.passed(store, problem.name)).solution is None

    judged = scripted(monkeypatch, [(1.0, 4.0), (2.0, 1.5), (1.0, 1.5)], real_composite=False)
    config = OptimizeConfig(budget=2, device="cpu", baseline="eager",
                            cache_dir=tmp_path / "cache", race=False)
    lines: list[str] = []
    optimizer = Optimizer(problem, store, config, lines.append)
    found = optimizer.recompose()
    assert optimizer.rejudged == 2 and len(judged) == 4  # the two, the reference, the composite
    assert {uuid: j.name for uuid, j in found.assignment.items()} == {
        "small-t8": "prefill", "small-t64": "decode"}  # judged best first: prefill got (1, 4)
    with store.session() as s:
        assert s.query(Candidate).count() == 4  # the two, reference, composite: no duplicate
        assert s.query(CandidateWorkload).filter(
            CandidateWorkload.candidate_id.in_([decode, prefill])).count() == 4

    again = Optimizer(problem, store, config, lines.append)
    again.recompose()
    assert again.rejudged == 0 and again.reused == 2 and len(judged) == 4


def test_recompose_with_seeds_judges_the_seeds_the_store_lacks_once(tmp_path, monkeypatch):
    """A store searched before its template had seeds: `recompose(seeds=True)` judges each
    valid seed the store lacks as a candidate of its template (one already judged is read
    back, an invalid one never rendered), then composes; a second call judges no seed."""
    from solforge.forge.templates.row_norm import TEMPLATE

    def setting(rows: int, block: int, method: str = "single_pass") -> dict:
        return {"ROWS": rows, "BLOCK": block, "NUM_WARPS": 1, "METHOD": method}

    seeded = replace(TEMPLATE, seeds=(setting(1, 256), setting(2, 256), setting(1, 8192)))
    monkeypatch.setattr(loop, "templates_for", lambda definition: [seeded])
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    known = seeded.render(setting(2, 256), problem)  # searched earlier: in the store
    archive.add_candidate(store, archive.CandidateRecord(
        problem=problem.name, name=known["name"], proposer="template:row_norm", solution=known,
        status="PASSED", fitness=1.0, fitness_kind="speedup", latency_ms=1.0, cell=CELL,
        descriptor={"evidence": []}, evidence=None, params={}))
    judged = scripted(monkeypatch, [(1.0, 4.0), (2.0, 1.5)], real_composite=False)
    config = OptimizeConfig(budget=0, device="cpu", baseline="eager",  # beyond the budget
                            cache_dir=tmp_path / "cache", race=False)
    lines: list[str] = []
    optimizer = Optimizer(problem, store, config, lines.append)
    optimizer.recompose(seeds=True)
    fresh = seeded.render(setting(1, 256), problem)["name"]
    assert optimizer.seeds_judged == 1 and judged[0] == fresh  # not the stored one, nor 8192
    assert any(line.startswith(f"seed {fresh}: PASSED") for line in lines)
    stored = archive.find(store, problem.name, seeded.render(setting(1, 256), problem))
    assert stored is not None and stored.proposer == "template:row_norm"

    again = Optimizer(problem, store, config, lines.append)
    again.recompose(seeds=True)
    assert again.seeds_judged == 0 and fresh not in judged[1:]


@pytest.mark.slow
def test_the_descriptor_code_describes_a_composite_of_template_kernels():
    """Captured for sm_90a on the smallest workload, a composite of two template settings is
    described (no crash) by the part that workload dispatches to."""
    from solforge.forge.descriptors import describe_solution
    from solforge.forge.templates import templates_for

    problem = load_problem(PROBLEM)
    template = templates_for(problem.definition)[0]
    settings = [c for c in template.configurations()
                if template.invalid_reason(c, problem) is None]
    first, last = (template.render(c, problem) for c in (settings[0], settings[-1]))
    parts = [Judged(1, first["name"], "template:a", 1.0, first, CELL, {},
                    {"small-t8": 1.0, "small-t64": 3.0}),
             Judged(2, last["name"], "template:b", 1.0, last, CELL, {},
                    {"small-t8": 2.0, "small-t64": 1.0})]
    found = compose(problem, parts)
    described = describe_solution(parse_solution(found.solution), problem,
                                  problem.smallest_workload())
    assert described.compute_path == "cuda_core" and "heaviest of 1 launch" in \
        described.evidence[0]


def test_the_reference_part_is_the_reference_returning_its_outputs(tmp_path, monkeypatch):
    problem = load_problem(PROBLEM)
    solution = reference_candidate(problem.definition)
    parsed = parse_solution(solution)
    assert not parsed.destination_passing_style and parsed.languages == ("pytorch",)
    run = load_entry(solution, tmp_path / "src", monkeypatch, module="reference")
    hidden = torch.randn(8, 256, dtype=torch.bfloat16)
    weight = torch.randn(256, dtype=torch.bfloat16)
    expected = load_reference_module(problem.definition).run(hidden, weight, 1e-5)
    assert torch.equal(run(hidden, weight, 1e-5), expected)

    output = next(iter(problem.definition.outputs.values()))
    scalar = replace(problem.definition, outputs={"loss": replace(output, shape=None)})
    assert reference_candidate(scalar) is None  # no buffer a kernel part could write
    packed = replace(problem.definition, outputs={"out": replace(output, dtype=FP4)})
    assert reference_candidate(packed) is None


def returning_parts(problem) -> list[Judged]:
    """A destination-passing sentinel that wins small-t8 and the reference (returning its
    outputs) that wins small-t64."""
    reference = reference_candidate(problem.definition)
    return [Judged(1, "fill", "template:t", 1.0, sentinel("fill", 1.0), CELL, {},
                   {"small-t8": 1.0, "small-t64": 3.0}),
            Judged(2, reference["name"], "reference", 0.5, reference, None, {},
                   {"small-t8": 2.0, "small-t64": 1.0})]


def test_a_composite_with_the_reference_returns_its_outputs(tmp_path, monkeypatch):
    """The reference's outputs come back untouched; a destination-passing part gets outputs
    allocated by the dispatcher, of the definition's shape and dtype."""
    problem = load_problem(PROBLEM)
    found = compose(problem, returning_parts(problem))
    assert not parse_solution(found.solution).destination_passing_style
    run = load_entry(found.solution, tmp_path / "src", monkeypatch)
    weight = torch.randn(256, dtype=torch.bfloat16)
    reference = load_reference_module(problem.definition).run
    for tokens in (8, 5):  # the sentinel's shape, and one no workload has (the fallback)
        [out] = run(torch.randn(tokens, 256, dtype=torch.bfloat16), weight, 1e-5)
        assert out.shape == (tokens, 256) and out.dtype == torch.bfloat16
        assert torch.all(out == 1.0)
    hidden = torch.randn(64, 256, dtype=torch.bfloat16)
    assert torch.equal(run(hidden, weight, 1e-5), reference(hidden, weight, 1e-5))


def test_a_returning_part_joins_only_where_outputs_can_be_allocated():
    """With an output the dispatcher cannot allocate (here a packed dtype), the reference part
    is left out and the destination-passing candidates compose alone."""
    problem = load_problem(PROBLEM)
    output = next(iter(problem.definition.outputs.values()))
    packed = replace(problem, definition=replace(
        problem.definition, outputs={"out": replace(output, dtype=FP4)}))
    parts = returning_parts(problem)
    found = compose(packed, parts)
    assert found.solution is None and {j.name for j in found.assignment.values()} == {"fill"}


def test_a_shape_no_kernel_wins_goes_to_the_reference(tmp_path, monkeypatch):
    """The reference, judged as a part, is fastest on small-t64: the composite sends that shape
    to it, and (the reference being the fallback too, with no cell) files under the best
    kernel's cell."""
    judged = scripted(monkeypatch, [(1.0, 4.0), (2.0, 5.0)], real_composite=False,
                      reference=(3.0, 1.0))
    problem = load_problem(PROBLEM)
    store, lines, _ = optimize(tmp_path)
    assert judged[2] == "rmsnorm_small-reference" and "-composite-" in judged[3]
    assert any(f"small-t8 -> {judged[0]}; small-t64 -> rmsnorm_small-reference" in line
               for line in lines)
    candidates = archive.candidates(store, problem.name)
    [reference] = [c for c in candidates if c.proposer == "reference"]
    [composite] = [c for c in candidates if c.proposer == "compose"]
    assert reference.cell is None  # a part, never an elite
    assert composite.cell == CELL and "best kernel" in composite.descriptor["evidence"][0]


@pytest.mark.slow
def test_the_harness_passes_the_reference_part_and_a_composite_returning_outputs(tmp_path):
    """The composite's destination-passing part computes the reference into the outputs the
    dispatcher allocated: both shapes pass, whichever part serves them."""
    from solforge.harness.evaluate import evaluate

    problem = load_problem(PROBLEM)
    config = EvalConfig(device="cpu", baseline="eager", smallest=2, cache_dir=tmp_path / "cache")
    reference = reference_candidate(problem.definition)
    into = {**sentinel("into", 0.0), "sources": [{"path": "kernel.py", "content": (
        problem.definition.reference + "\n\n_returning = run\n\n\n"
        "def run(hidden_states, norm_weight, eps, output):\n"
        "    output.copy_(_returning(hidden_states, norm_weight, eps))\n")}]}
    parts = [Judged(1, "into", "template:t", 1.0, into, CELL, {},
                    {"small-t8": 1.0, "small-t64": 3.0}),
             Judged(2, reference["name"], "reference", 0.5, reference, None, {},
                    {"small-t8": 2.0, "small-t64": 1.0})]
    found = compose(problem, parts)
    for solution in (reference, found.solution):
        traces = evaluate(problem, parse_solution(solution), config)
        assert [t.evaluation.status for t in traces] == [Status.PASSED, Status.PASSED]
