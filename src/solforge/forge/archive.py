"""The MAP-Elites archive in the results store: candidates, cells and their elites.

Many optimizer processes may share one store (PostgreSQL), so every write is one transaction
that cannot lose another's: a candidate is inserted once per (problem, source hash), and an
elite is replaced by a conditional UPDATE (`... WHERE fitness < :new`), so of two workers
improving one cell at the same time the better kernel wins whichever commits first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from solforge.data.trace import Status
from solforge.forge.fitness import WorkloadResult
from solforge.store.schema import ArchiveCell, Candidate, CandidateWorkload, ScreenedCandidate
from solforge.store.store import Store, solution_hash


@dataclass(frozen=True)
class Elite:
    cell: str
    candidate_id: int
    name: str
    fitness: float
    latency_ms: float | None
    solution: dict[str, Any]
    descriptor: dict[str, Any]


@dataclass(frozen=True)
class CandidateRecord:
    """What the loop learned about one candidate, ready to store."""

    problem: str
    name: str
    proposer: str
    solution: dict[str, Any]
    status: str
    fitness: float | None
    fitness_kind: str
    latency_ms: float | None
    cell: str | None
    descriptor: dict[str, Any]
    evidence: str | None
    params: dict[str, Any]
    parent_id: int | None = None


@dataclass(frozen=True)
class Judged:
    """A PASSED candidate with a fitness and its T_k on each workload it PASSED (empty for a
    candidate judged before per-workload results were kept)."""

    candidate_id: int
    name: str
    proposer: str
    fitness: float
    solution: dict[str, Any]
    cell: str | None
    descriptor: dict[str, Any]
    latencies: dict[str, float]  # workload uuid -> T_k


def find(store: Store, problem: str, solution: dict[str, Any]) -> Candidate | None:
    """This exact kernel, if any worker already judged it for this problem."""
    digest = solution_hash(solution)
    with store.session() as s:
        return s.scalar(select(Candidate).where(Candidate.problem == problem,
                                                Candidate.source_hash == digest))


def add_candidate(store: Store, record: CandidateRecord) -> int:
    """Store a judged candidate (once: a second worker with the same kernel gets the first id)."""
    digest = solution_hash(record.solution)
    try:
        with store.session() as s:
            row = Candidate(problem=record.problem, source_hash=digest, name=record.name,
                            proposer=record.proposer, parent_id=record.parent_id,
                            params=record.params, solution=record.solution,
                            status=record.status, fitness=record.fitness,
                            fitness_kind=record.fitness_kind, latency_ms=record.latency_ms,
                            cell=record.cell, descriptor=record.descriptor,
                            evidence=record.evidence)
            s.add(row)
            s.flush()
            return row.id
    except IntegrityError:
        with store.session() as s:
            return s.scalar(select(Candidate.id).where(Candidate.problem == record.problem,
                                                       Candidate.source_hash == digest))


def offer_elite(store: Store, problem: str, cell: str, candidate_id: int,
                fitness: float) -> bool:
    """Make the candidate its cell's elite if it beats the current one; True if it did."""
    with store.session() as s:
        replaced = s.execute(update(ArchiveCell)
                             .where(ArchiveCell.problem == problem, ArchiveCell.cell == cell,
                                    ArchiveCell.fitness < fitness)
                             .values(elite_id=candidate_id, fitness=fitness)).rowcount
        if replaced:
            return True
    try:
        with store.session() as s:
            s.add(ArchiveCell(problem=problem, cell=cell, elite_id=candidate_id,
                              fitness=fitness))
        return True
    except IntegrityError:  # another worker created the cell first: compare again
        with store.session() as s:
            return bool(s.execute(update(ArchiveCell)
                                  .where(ArchiveCell.problem == problem,
                                         ArchiveCell.cell == cell,
                                         ArchiveCell.fitness < fitness)
                                  .values(elite_id=candidate_id, fitness=fitness)).rowcount)


def elites(store: Store, problem: str) -> list[Elite]:
    """Every cell's elite, best first."""
    with store.session() as s:
        rows = s.execute(select(ArchiveCell, Candidate)
                         .join(Candidate, Candidate.id == ArchiveCell.elite_id)
                         .where(ArchiveCell.problem == problem)
                         .order_by(ArchiveCell.fitness.desc())).all()
    return [Elite(cell.cell, candidate.id, candidate.name, cell.fitness, candidate.latency_ms,
                  candidate.solution, candidate.descriptor) for cell, candidate in rows]


def candidates(store: Store, problem: str) -> list[Candidate]:
    with store.session() as s:
        return list(s.scalars(select(Candidate).where(Candidate.problem == problem)
                              .order_by(Candidate.id)))


def record_workloads(store: Store, candidate_id: int, results: Sequence[WorkloadResult]) -> None:
    """Keep a candidate's per-workload results, replacing those of an earlier judgment (a
    re-judged candidate keeps one row per workload). A worker that loses a race with another
    writing the same candidate's rows leaves the winner's."""
    try:
        with store.session() as s:
            s.execute(delete(CandidateWorkload)
                      .where(CandidateWorkload.candidate_id == candidate_id))
            s.add_all(CandidateWorkload(candidate_id=candidate_id, workload=r.workload,
                                        status=r.status, latency_ms=r.latency_ms,
                                        sol_score=r.sol_score) for r in results)
    except IntegrityError:
        return


def mark_screened(store: Store, candidate_id: int) -> None:
    """Note that the candidate was timed only briefly (once; a second mark is a no-op)."""
    try:
        with store.session() as s:
            s.add(ScreenedCandidate(candidate_id=candidate_id))
    except IntegrityError:
        return


def screened(store: Store, problem: str) -> set[int]:
    """The ids of the problem's candidates timed only briefly (`mark_screened`)."""
    with store.session() as s:
        return set(s.scalars(select(ScreenedCandidate.candidate_id)
                             .join(Candidate, Candidate.id == ScreenedCandidate.candidate_id)
                             .where(Candidate.problem == problem)))


def workload_results(store: Store, candidate_id: int) -> list[WorkloadResult]:
    """A candidate's stored per-workload results, in workload order of recording."""
    with store.session() as s:
        rows = s.scalars(select(CandidateWorkload)
                         .where(CandidateWorkload.candidate_id == candidate_id)
                         .order_by(CandidateWorkload.id))
        return [WorkloadResult(r.workload, r.status, r.latency_ms, r.sol_score) for r in rows]


def passed(store: Store, problem: str) -> list[Judged]:
    """Every PASSED candidate with a fitness, best first, with its per-workload T_k."""
    with store.session() as s:
        rows = list(s.scalars(select(Candidate)
                              .where(Candidate.problem == problem,
                                     Candidate.status == Status.PASSED.value,
                                     Candidate.fitness.is_not(None))
                              .order_by(Candidate.fitness.desc(), Candidate.id)))
        ids = [row.id for row in rows]
        found = s.execute(select(CandidateWorkload.candidate_id, CandidateWorkload.workload,
                                 CandidateWorkload.latency_ms)
                          .where(CandidateWorkload.candidate_id.in_(ids),
                                 CandidateWorkload.status == Status.PASSED.value,
                                 CandidateWorkload.latency_ms.is_not(None))).all()
    latencies: dict[int, dict[str, float]] = {}
    for candidate_id, workload, latency_ms in found:
        latencies.setdefault(candidate_id, {})[workload] = latency_ms
    return [Judged(row.id, row.name, row.proposer, row.fitness, row.solution, row.cell,
                   row.descriptor, latencies.get(row.id, {})) for row in rows]


def best_of_each_proposer(store: Store, problem: str, limit: int,
                          prefix: str = "") -> list[Judged]:
    """The best PASSED candidate of each proposer whose name starts with `prefix` (for
    "template:", each template's best elite), the best `limit` of them, best first."""
    chosen: dict[str, Judged] = {}
    for judged in passed(store, problem):
        if judged.proposer.startswith(prefix) and judged.proposer not in chosen:
            chosen[judged.proposer] = judged
    return list(chosen.values())[:limit]
