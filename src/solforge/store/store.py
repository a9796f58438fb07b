"""Read and write the results store: every call commits, so an interrupted bench keeps all it
measured, and `has_trace` lets a rerun skip finished work."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from solforge.errors import SolforgeError
from solforge.problem.problem import Problem
from solforge.problem.workload import Workload
from solforge.store.schema import (
    AnalysisRow,
    Base,
    ProblemRow,
    Run,
    SolutionRow,
    TraceRow,
    WorkloadRow,
)

DEFAULT_URL = "sqlite:///solforge.db"


class StoreError(SolforgeError):
    """A database URL that cannot be opened, or a trace file that cannot be read."""


def solution_hash(solution: dict[str, Any]) -> str:
    """The identity of a solution: a hash of its canonical JSON (name, spec and sources)."""
    canonical = json.dumps(solution, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Store:
    def __init__(self, url: str | None = None) -> None:
        self.url = url or DEFAULT_URL
        try:
            engine = create_engine(make_url(self.url))
            Base.metadata.create_all(engine)
        except (ArgumentError, OperationalError, ModuleNotFoundError) as exc:
            raise StoreError(f"cannot open the store {self.url!r}: {exc}") from None
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    # ---- runs ------------------------------------------------------------------------------

    def begin_run(self, command: str, device: str, hardware: str,
                  environment: dict[str, Any]) -> int:
        with self.session() as s:
            run = Run(command=command, device=device, hardware=hardware,
                      environment=environment)
            s.add(run)
            s.flush()
            return run.id

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        with self.session() as s:
            run = s.get(Run, run_id)
            run.status = status
            run.finished_at = datetime.datetime.now(datetime.timezone.utc)

    # ---- problems, workloads, analyses, solutions -------------------------------------------

    def problem_id(self, address: str, problem: Problem, tier: str | None) -> int:
        with self.session() as s:
            row = s.scalar(select(ProblemRow).where(ProblemRow.address == address))
            if row is None:
                row = ProblemRow(address=address, name=problem.name, tier=tier,
                                 op_type=problem.definition.op_type,
                                 definition=problem.definition.to_dict())
                s.add(row)
                s.flush()
            return row.id

    def workload_id(self, problem_id: int, workload: Workload, axes: dict[str, int]) -> int:
        with self.session() as s:
            row = s.scalar(select(WorkloadRow).where(WorkloadRow.problem_id == problem_id,
                                                     WorkloadRow.uuid == workload.uuid))
            if row is None:
                row = WorkloadRow(problem_id=problem_id, uuid=workload.uuid, axes=axes)
                s.add(row)
                s.flush()
            return row.id

    def save_analysis(self, workload_id: int, analysis: dict[str, Any]) -> None:
        """Keep one analysis per (workload, hardware, fp32 policy); a newer one replaces it."""
        with self.session() as s:
            row = s.scalar(select(AnalysisRow).where(
                AnalysisRow.workload_id == workload_id,
                AnalysisRow.hardware == analysis["hardware"],
                AnalysisRow.fp32_policy == analysis["fp32_policy"]))
            if row is None:
                row = AnalysisRow(workload_id=workload_id, hardware=analysis["hardware"],
                                  fp32_policy=analysis["fp32_policy"])
                s.add(row)
            row.t_sol_ms = analysis["t_sol_ms"]
            row.bound = analysis["bound"]
            row.flops = float(sum(analysis["flops"].values()))
            row.bytes_fused = analysis["bytes_fused"]
            row.details = analysis

    def solution_id(self, solution: dict[str, Any]) -> int:
        digest = solution_hash(solution)
        with self.session() as s:
            row = s.scalar(select(SolutionRow).where(SolutionRow.source_hash == digest))
            if row is None:
                spec = solution.get("spec", {})
                row = SolutionRow(source_hash=digest, name=solution.get("name", "?"),
                                  definition=solution.get("definition", ""),
                                  author=solution.get("author", ""),
                                  languages=list(spec.get("languages", [])), solution=solution)
                s.add(row)
                s.flush()
            return row.id

    # ---- traces ----------------------------------------------------------------------------

    def has_trace(self, workload_id: int, solution_id: int, device: str, hardware: str) -> bool:
        with self.session() as s:
            return s.scalar(select(TraceRow.id).where(
                TraceRow.workload_id == workload_id, TraceRow.solution_id == solution_id,
                TraceRow.device == device, TraceRow.hardware == hardware)) is not None

    def save_trace(self, run_id: int | None, workload_id: int, solution_id: int, device: str,
                   hardware: str, trace: dict[str, Any]) -> None:
        """Record one trace (a FlashInfer-Trace dict); a second one for the same
        (workload, solution, device, hardware) replaces the first."""
        evaluation = trace["evaluation"]
        performance = evaluation.get("performance") or {}
        baseline = evaluation.get("baseline") or {}
        with self.session() as s:
            row = s.scalar(select(TraceRow).where(
                TraceRow.workload_id == workload_id, TraceRow.solution_id == solution_id,
                TraceRow.device == device, TraceRow.hardware == hardware))
            if row is None:
                row = TraceRow(workload_id=workload_id, solution_id=solution_id,
                               device=device, hardware=hardware)
                s.add(row)
            row.run_id = run_id
            row.status = evaluation["status"]
            row.latency_ms = performance.get("latency_ms")
            row.reference_latency_ms = performance.get("reference_latency_ms")
            row.eager_ms = baseline.get("eager_ms")
            row.compile_ms = baseline.get("compile_ms")
            row.t_sol_ms = evaluation.get("t_sol_ms")
            row.sol_score = evaluation.get("sol_score")
            row.record = trace

    def traces(self) -> list[TraceRow]:
        with self.session() as s:
            return list(s.scalars(select(TraceRow).order_by(TraceRow.id)))

    def export_traces(self, path: Path) -> int:
        """Write every trace as FlashInfer-Trace JSONL; returns the count."""
        rows = self.traces()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            for row in rows:
                out.write(json.dumps(row.record, allow_nan=False) + "\n")
        return len(rows)
