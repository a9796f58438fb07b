"""The optimize loop on the CPU: templates seed the archive, the LLM path runs against a local
OpenAI-compatible server, reruns reuse what the store holds, and a hack never becomes an elite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import TESTS
from typer.testing import CliRunner

from solforge.cli import app
from solforge.forge import archive
from solforge.forge.llm import LLMConfig
from solforge.forge.loop import OptimizeConfig, OptimizeError, Optimizer
from solforge.problem import load_problem
from solforge.store import Store
from solforge.store.schema import LLMCall

ROOT = TESTS
PROBLEM = ROOT / "fixtures" / "harness" / "rmsnorm_small"

sys.path.insert(0, str(ROOT))
from openai_server import FakeOpenAI  # noqa: E402


def cpu_config(tmp_path: Path, **changes) -> OptimizeConfig:
    settings = {"budget": 2, "device": "cpu", "baseline": "eager", "cache_dir": tmp_path / "cache"}
    return OptimizeConfig(**{**settings, **changes})


def quiet(line: str) -> None:
    return None


def solution_of(file: Path, definition: str) -> dict:
    """A bare solution file as a FlashInfer-Bench solution JSON (value-returning `run`)."""
    return {"name": file.parent.name, "definition": definition, "author": "test",
            "spec": {"languages": ["pytorch"], "entry_point": "solution.py::run",
                     "destination_passing_style": False},
            "sources": [{"path": "solution.py", "content": file.read_text()}]}


@pytest.mark.slow
def test_templates_seed_the_archive_and_a_rerun_reuses_the_store(tmp_path):
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    first = Optimizer(problem, store, cpu_config(tmp_path), quiet).run()
    assert first.judged == 2
    assert first.best is not None and first.best.fitness > 0
    assert first.best.cell.count("/") == 3  # memory/compute/parallel/tile
    stored = archive.candidates(store, problem.name)
    assert len(stored) == 2 and all(c.status == "PASSED" for c in stored)
    again = Optimizer(problem, store, cpu_config(tmp_path), quiet).run()
    assert again.reused >= 2  # the same settings come first: judged once, read back after
    assert len(archive.candidates(store, problem.name)) == len(stored) + again.judged


@pytest.mark.slow
def test_a_reward_hack_is_recorded_with_evidence_and_never_an_elite(tmp_path):
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    hack = solution_of(ROOT / "exploits" / "lazy_output" / "solution.py", problem.name)
    judged = Optimizer(problem, store, cpu_config(tmp_path), quiet).judge(hack, "test")
    assert judged.status == "REWARD_HACK" and judged.fitness is None
    [row] = archive.candidates(store, problem.name)
    assert row.status == "REWARD_HACK" and row.evidence
    assert archive.elites(store, problem.name) == []


@pytest.mark.slow
def test_the_llm_path_runs_against_an_openai_compatible_server(tmp_path):
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    with FakeOpenAI() as server:
        llm = LLMConfig(base_url=server.base_url, model="test-model", seed=0)
        outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=1, proposer="llm",
                                                       llm=llm), quiet).run()
    assert outcome.judged == 1
    assert outcome.best is not None and outcome.best.fitness > 0
    [candidate] = archive.candidates(store, problem.name)
    assert candidate.proposer == "llm:test-model"
    with store.session() as s:
        calls = s.query(LLMCall).all()
    assert calls and calls[0].prompt_tokens and calls[0].status == "ok"


def test_the_llm_proposer_needs_an_endpoint():
    with pytest.raises(OptimizeError, match="--llm-base-url"):
        OptimizeConfig(budget=1, proposer="llm")


@pytest.mark.slow
def test_cli_optimize_writes_the_best_and_shows_the_archive(tmp_path, monkeypatch):
    """Both commands in this process (tests/cli runs `python -m solforge` itself)."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'forge.db'}"
    best = tmp_path / "best.json"
    runner = CliRunner()
    done = runner.invoke(app, ["optimize", str(PROBLEM), "--device", "cpu", "--budget", "1",
                               "--db", db, "-o", str(best)])
    assert done.exit_code == 0, done.output
    assert best.is_file() and "best:" in done.stdout
    shown = runner.invoke(app, ["archive", "show", str(PROBLEM), "--db", db])
    assert shown.exit_code == 0, shown.output
    assert "memory \\ compute" in shown.stdout and "elites, best first" in shown.stdout


def _scripted(monkeypatch, fitnesses: list[float]) -> list[float]:
    """Judging replaced by a script of fitnesses, one per candidate (every one PASSED, in one
    cell): what the patience rule sees, without running a kernel."""
    from solforge.forge import llm, loop
    from solforge.forge.fitness import SOL_SCORE, Verdict

    given: list[float] = []

    def judged_one(*args) -> list[int]:  # a candidate's "traces": its number
        given.append(fitnesses[len(given)])
        return [len(given) - 1]

    def judged(traces):  # read for the archive, and again for the search
        return Verdict("PASSED", given[traces[0]], SOL_SCORE, 1.0, None)

    monkeypatch.setattr(loop, "evaluate", judged_one)
    monkeypatch.setattr(loop, "verdict", judged)
    monkeypatch.setattr(loop, "workload_results", lambda traces: [])
    monkeypatch.setattr(llm, "attempt_from_traces", lambda solution, traces: None)
    monkeypatch.setattr(Optimizer, "_describe",
                        lambda self, solution: ({}, "dram/simt/rows/small"))
    return given


def test_a_search_ends_after_patience_candidates_without_a_gain(tmp_path, monkeypatch):
    """--patience 3: two gains, then three candidates within 1% of the best end the search,
    well inside its budget, and the run says it converged; the budget cutting it short first
    is no convergence."""
    fitnesses = [0.50, 0.60, 0.603, 0.605, 0.604, 0.9, 0.9, 0.9]
    given = _scripted(monkeypatch, fitnesses)
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=20, patience=3, race=False),
                        quiet).run()
    assert given == fitnesses[:5] and outcome.judged == 5
    assert outcome.converged and outcome.best.fitness == pytest.approx(0.605)

    given.clear()
    store = Store(f"sqlite:///{tmp_path / 'other.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=4, patience=3, race=False),
                        quiet).run()
    assert outcome.judged == 4 and not outcome.converged


def test_a_search_the_time_limit_ends_says_so(tmp_path, monkeypatch):
    """`minutes` running out ends a search as out of time (a caller goes on with it later);
    the budget ending it is not."""
    from solforge.forge import loop

    _scripted(monkeypatch, [0.1 * n for n in range(1, 9)])
    clock = iter(range(0, 10_000, 25))  # 25 s further at every look at the clock
    monkeypatch.setattr(loop.time, "monotonic", lambda: float(next(clock)))
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=8, minutes=1.0, race=False),
                        quiet).run()
    assert outcome.out_of_time and not outcome.converged and 0 < outcome.judged < 8

    monkeypatch.setattr(loop.time, "monotonic", lambda: 0.0)
    store = Store(f"sqlite:///{tmp_path / 'other.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=3, minutes=1.0, race=False),
                        quiet).run()
    assert outcome.judged == 3 and not outcome.out_of_time


def test_patience_must_be_positive():
    with pytest.raises(OptimizeError, match="patience 0"):
        OptimizeConfig(budget=2, patience=0)


def _raced(monkeypatch, brief: list[float], full: list[float]) -> list[tuple[int, bool]]:
    """Judging replaced by a script: candidate k's fitness is `brief[k]` timed briefly and
    `full[k]` in full; the calls, as (candidate, screened), in order."""
    from solforge.forge import llm, loop
    from solforge.forge.fitness import SOL_SCORE, Verdict

    calls: list[tuple[int, bool]] = []
    order: dict[str, int] = {}

    def judged_one(problem, solution, config) -> list[tuple[int, bool]]:
        calls.append((order.setdefault(solution.name, len(order)), config.screen))
        return [calls[-1]]

    def judged(traces):
        number, screened = traces[0]
        return Verdict("PASSED", (brief if screened else full)[number], SOL_SCORE, 1.0, None)

    monkeypatch.setattr(loop, "evaluate", judged_one)
    monkeypatch.setattr(loop, "verdict", judged)
    monkeypatch.setattr(loop, "workload_results", lambda traces: [])
    monkeypatch.setattr(llm, "attempt_from_traces", lambda solution, traces: None)
    monkeypatch.setattr(Optimizer, "_describe",
                        lambda self, solution: ({}, f"dram/simt/rows/{len(order)}"))
    return calls


def test_racing_times_in_full_only_the_candidates_near_the_best(tmp_path, monkeypatch):
    """Each candidate is timed briefly; those within 5% of the best so far are timed again in
    full, and their full verdict is the one stored; the others keep the brief one, marked as
    screened in the store, and none of them is the best."""
    from solforge.forge import archive

    brief = [0.50, 0.30, 0.52, 0.50, 0.20]
    full = [0.49, 0.99, 0.51, 0.40, 0.99]  # 0.99: never asked for (those stay brief)
    calls = _raced(monkeypatch, brief, full)
    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=5, compose=False),
                        quiet).run()
    # 0.50 (no best yet), 0.52 (above 0.49) and 0.50 (within 5% of 0.51) again in full
    assert calls == [(0, True), (0, False), (1, True), (2, True), (2, False), (3, True),
                     (3, False), (4, True)]
    assert (outcome.judged, outcome.confirmed, outcome.screened) == (5, 3, 2)
    assert outcome.confirmations == ((0.50, 0.49), (0.52, 0.51), (0.50, 0.40))
    stored = {row.fitness: row.id for row in archive.candidates(store, problem.name)}
    assert sorted(stored) == [0.20, 0.30, 0.40, 0.49, 0.51]
    assert archive.screened(store, problem.name) == {stored[0.30], stored[0.20]}
    assert outcome.best.fitness == pytest.approx(0.51)

    calls = _raced(monkeypatch, brief, full)  # without racing: one full timing each
    store = Store(f"sqlite:///{tmp_path / 'other.db'}")
    outcome = Optimizer(problem, store, cpu_config(tmp_path, budget=3, compose=False,
                                                   race=False), quiet).run()
    assert [screened for _, screened in calls] == [False] * 3 and outcome.confirmed == 0
    assert not archive.screened(store, problem.name)


def test_racing_times_in_full_until_the_batchs_best_is_a_full_timing(tmp_path, monkeypatch):
    """In one batch, a brief leader whose full timing comes out lower leaves another's brief
    fitness on top: that one is timed in full too, so the best stored is a full timing."""
    import itertools

    from solforge.forge import archive
    from solforge.forge.templates import templates_for

    brief = [0.60, 0.56, 0.40]
    full = [0.50, 0.55, 0.99]  # 0.99: never asked for
    calls = _raced(monkeypatch, brief, full)
    problem = load_problem(PROBLEM)
    template = templates_for(problem.definition)[0]
    settings = (dict(zip(template.space, values))
                for values in itertools.product(*template.space.values()))
    valid = [s for s in settings if template.invalid_reason(s, problem) is None][:3]
    solutions = [template.render(s, problem) for s in valid]
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    optimizer = Optimizer(problem, store, cpu_config(tmp_path, budget=5, compose=False), quiet)
    verdicts = optimizer.judge_batch(solutions, "test")
    # 0.60 was the bar (0.56 below its 5%); timed in full it is 0.50, so 0.56 leads: timed too
    assert calls == [(0, True), (1, True), (2, True), (0, False), (1, False)]
    assert [v.fitness for v in verdicts] == [0.50, 0.55, 0.40]
    stored = {row.fitness: row.id for row in archive.candidates(store, problem.name)}
    assert archive.screened(store, problem.name) == {stored[0.40]}
    assert optimizer.confirmations == [(0.60, 0.50), (0.56, 0.55)]
