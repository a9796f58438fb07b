"""One results store written by several processes at once: on a real PostgreSQL server (the one
.ci/run starts, named by SOLFORGE_TEST_POSTGRES_URL) and on SQLite.

Writers open a new database together (its tables must be created once), then, round after
round and all at the same moment, ask for the same problem, workloads and solution, save the
same analyses and the same trace, and save rows of their own. Every writer must get the same
ids, every key must have exactly one row, and no row of any writer may be missing. Then the
optimizer's archive: writers add the same and their own candidates and offer each as the elite
of the same cells at once; every candidate is stored once, and each cell ends with the best
fitness offered.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from harness_corpus import PROBLEMS
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from solforge.data.trace import Correctness, Environment, Evaluation, Performance, Status, Trace
from solforge.problem import load_problem
from solforge.store import Store
from solforge.store.schema import AnalysisRow, ProblemRow, SolutionRow, TraceRow, WorkloadRow

SERVER_URL = "SOLFORGE_TEST_POSTGRES_URL"
WRITERS = 4
ROUNDS = 8
WAIT_S = 30.0  # a writer that never arrives breaks the barrier instead of hanging the rest
SMALL = PROBLEMS / "rmsnorm_small"
WORKLOADS = len(load_problem(SMALL).workloads)
HARDWARE = "CPU_test"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new, empty database on the server, dropped afterwards."""
    server = os.environ.get(SERVER_URL)
    if not server:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs without {SERVER_URL}: .ci/run must start PostgreSQL")
        pytest.skip(f"no PostgreSQL server: set {SERVER_URL} to postgresql+psycopg://USER@"
                    "HOST:PORT/DB (.ci/run starts one and sets it)")
    name = f"solforge_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(server).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def _solution(name: str) -> dict[str, Any]:
    return {"name": name, "definition": "rmsnorm_small", "author": "tests",
            "spec": {"languages": ["pytorch"], "entry_point": "kernel.py::run"},
            "sources": [{"path": "kernel.py", "content": f"# {name}\ndef run(x): return x"}]}


def _trace(latency_ms: float, solution: str, uuid_: str) -> dict[str, Any]:
    evaluation = Evaluation(status=Status.PASSED, environment=Environment(HARDWARE, {}),
                            timestamp="2026-11-29T00:00:00+00:00", correctness=Correctness(),
                            performance=Performance(latency_ms, 2 * latency_ms, 2.0))
    return Trace("rmsnorm_small", solution, {"uuid": uuid_, "axes": {}}, evaluation).to_dict()


def _analysis(t_sol_ms: float) -> dict[str, Any]:
    return {"hardware": "H200", "fp32_policy": "tf32", "t_sol_ms": t_sol_ms,
            "bound": "memory", "flops": {"simt.fp32": 1.0}, "bytes_fused": 2.0}


def write_together(url: str, writer: int, barrier: Any, results: Any) -> None:
    """One writer: its ids for the shared rows, sent back through `results`."""
    barrier.wait(WAIT_S)
    store = Store(url)  # every writer creates the tables of the new database at once
    problem = load_problem(SMALL)
    seen = []
    for round_ in range(ROUNDS):
        barrier.wait(WAIT_S)  # every writer asks for the same rows at the same moment
        problem_id = store.problem_id(f"shared/{round_}", problem, None)
        workload_ids = [store.workload_id(problem_id, w, problem.axes(w))
                        for w in problem.workloads]
        shared = store.solution_id(_solution(f"shared {round_}"))
        own = store.solution_id(_solution(f"writer {writer} round {round_}"))
        for workload_id, workload in zip(workload_ids, problem.workloads):
            store.save_analysis(workload_id, _analysis(float(writer)))
            store.save_trace(None, workload_id, shared, "cpu", HARDWARE,
                             _trace(float(writer + 1), f"shared {round_}", workload.uuid))
            store.save_trace(None, workload_id, own, "cpu", HARDWARE,
                             _trace(1.0, f"writer {writer} round {round_}", workload.uuid))
        seen.append((problem_id, workload_ids, shared))
    store.engine.dispose()
    results.put((writer, seen))


def _run_writers(url: str, target: Any = None) -> list[list[Any]]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS)
    results = context.Queue()
    writers = [context.Process(target=target or write_together, args=(url, n, barrier, results))
               for n in range(WRITERS)]
    for process in writers:
        process.start()
    try:
        seen = dict(results.get(timeout=2 * WAIT_S) for _ in writers)
    finally:
        for process in writers:
            process.join(timeout=WAIT_S)
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in writers] == [0] * WRITERS
    return [seen[n] for n in range(WRITERS)]


def _check_one_row_per_key_and_none_lost(url: str) -> None:
    seen = _run_writers(url)
    assert all(ids == seen[0] for ids in seen)  # the same rows, whoever created them
    store = Store(url)
    shared_rows = ROUNDS * WORKLOADS
    assert len(store.rows(ProblemRow)) == ROUNDS
    assert len(store.rows(WorkloadRow)) == shared_rows
    assert len(store.rows(SolutionRow)) == ROUNDS * (1 + WRITERS)
    assert len(store.rows(AnalysisRow)) == shared_rows
    traces = store.rows(TraceRow)
    assert len(traces) == shared_rows * (1 + WRITERS)
    keys = {(t.workload_id, t.solution_id, t.device, t.hardware) for t in traces}
    assert len(keys) == len(traces)
    shared_ids = {shared for _, _, shared in seen[0]}
    shared_latencies = {t.latency_ms for t in traces if t.solution_id in shared_ids}
    assert shared_latencies <= {float(n + 1) for n in range(WRITERS)}  # one writer's, whole
    store.engine.dispose()


def test_writers_share_a_postgres_store_without_duplicates_or_losses(postgres_url):
    _check_one_row_per_key_and_none_lost(postgres_url)


@pytest.mark.slow
def test_writers_share_a_sqlite_store_without_duplicates_or_losses(tmp_path):
    _check_one_row_per_key_and_none_lost(f"sqlite:///{tmp_path / 'shared.db'}")


# -- the optimizer's archive: candidates once, elites replaced atomically ------------------------

CELLS = ("plain/cuda_core/tile_per_program/small", "tma/wgmma/persistent/large")


def _fitness(writer: int, round_: int, cell: int) -> float:
    """Distinct for every offer, and the best of each cell offered by no fixed writer."""
    return ((writer * 7 + round_ * 3 + cell * 5) % 29) + writer / 100 + round_ / 1000


def search_together(url: str, writer: int, barrier: Any, results: Any) -> None:
    """One optimizer: in every round the same shared candidate and one of its own, each offered
    as the elite of both cells, all writers at the same moment."""
    from solforge.forge import archive

    barrier.wait(WAIT_S)
    store = Store(url)
    ids = []
    for round_ in range(ROUNDS):
        barrier.wait(WAIT_S)
        for name in (f"shared {round_}", f"writer {writer} round {round_}"):
            record = archive.CandidateRecord(
                problem="rmsnorm_small", name=name, proposer=f"test:{writer}",
                solution=_solution(name), status="PASSED", fitness=1.0,
                fitness_kind="sol_score", latency_ms=1.0, cell=CELLS[0], descriptor={},
                evidence=None, params={})
            candidate = archive.add_candidate(store, record)
            ids.append((name, candidate))
            for number, cell in enumerate(CELLS):
                fitness = _fitness(writer, round_, number)
                archive.offer_elite(store, "rmsnorm_small", cell, candidate, fitness)
                ids.append((cell, candidate, fitness))
    store.engine.dispose()
    results.put((writer, ids))


def _check_the_archive(url: str) -> None:
    from solforge.forge import archive
    from solforge.store.schema import ArchiveCell, Candidate

    seen = _run_writers(url, search_together)
    store = Store(url)
    rows = store.rows(Candidate)
    assert len(rows) == ROUNDS * (1 + WRITERS)  # the shared candidates once, none lost
    by_name = {row.name: row.id for row in rows}
    for ids in seen:  # every writer got the one row of each shared candidate
        for entry in ids:
            if len(entry) == 2:
                assert by_name[entry[0]] == entry[1]
    cells = {cell.cell: cell for cell in store.rows(ArchiveCell)}
    assert set(cells) == set(CELLS)
    for cell in CELLS:
        offers = [(entry[2], entry[1]) for ids in seen for entry in ids
                  if len(entry) == 3 and entry[0] == cell]
        best_fitness = max(fitness for fitness, _ in offers)
        assert cells[cell].fitness == best_fitness  # no better offer lost to a race
        assert (best_fitness, cells[cell].elite_id) in offers  # the elite is that offer's
    assert [elite.fitness for elite in archive.elites(store, "rmsnorm_small")] == sorted(
        (cells[cell].fitness for cell in CELLS), reverse=True)
    store.engine.dispose()


def test_optimizers_share_a_postgres_archive_atomically(postgres_url):
    _check_the_archive(postgres_url)


@pytest.mark.slow
def test_optimizers_share_a_sqlite_archive_atomically(tmp_path):
    _check_the_archive(f"sqlite:///{tmp_path / 'archive.db'}")

