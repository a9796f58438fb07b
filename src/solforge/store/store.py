"""Read and write the results store: every call commits, so an interrupted bench keeps all it
measured, and `has_trace` lets a rerun skip finished work.

Several processes, on several machines, may write one store at once (optimizers sharing a
PostgreSQL archive). Every row that has a natural key is unique in the schema, so no race can
duplicate it; the writer that loses a race gets an IntegrityError and reads (or updates) the
row the winner wrote, so no race fails or loses a write either. The tables of a new database
are created IF NOT EXISTS, and on PostgreSQL under an advisory lock.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, Select, create_engine, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.schema import CreateIndex, CreateTable

from solforge.data.trace import TraceFormatError, read_traces
from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.problem.problem import Problem, load_problem
from solforge.problem.suite import address_of, bundled_problem_dirs, tier_of
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
SCHEMA_LOCK_KEY = 0x50F0F0C6  # the PostgreSQL advisory lock held while tables are created
SQLITE_BUSY_TIMEOUT_S = 60.0  # how long a SQLite writer waits for another process's commit

RowT = TypeVar("RowT", bound=Base)


class StoreError(SolforgeError):
    """A database URL that cannot be opened, or a trace file that cannot be read."""


def trace_device(evaluation: dict[str, Any]) -> str:
    """"cuda" or "cpu": the timing's device, else the hardware name (CPUs are `CPU_<arch>`)."""
    timing = evaluation.get("timing") or {}
    if timing.get("device"):
        return timing["device"]
    return "cpu" if evaluation["environment"]["hardware"].startswith("CPU_") else "cuda"


def bundled_problem_dir(name: str) -> Path | None:
    """The bundled problem folder whose definition is named `name` (folders bear that name)."""
    return next((folder for folder in bundled_problem_dirs() if folder.name == name), None)


def solution_hash(solution: dict[str, Any]) -> str:
    """The identity of a solution: a hash of its canonical JSON (name, spec and sources)."""
    canonical = json.dumps(solution, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Store:
    def __init__(self, url: str | None = None, create: bool = True) -> None:
        """Open the store at `url`. `create=False` (read-only commands) never creates a table:
        a database without solforge's tables is an error then. A database that holds other
        tables but not solforge's belongs to another application and is refused either way."""
        self.url = url or DEFAULT_URL
        try:
            parsed = make_url(self.url)
            options = ({"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
                       if parsed.get_backend_name() == "sqlite" else {})
            engine = create_engine(parsed, **options)
            found = set(inspect(engine).get_table_names())
            check_tables(self.url, found, create)
            if create:
                create_tables(engine)
        except (ArgumentError, DatabaseError, ModuleNotFoundError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StoreError(f"cannot open the store {self.url!r}: {reason}") from None
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

    def finish_run(self, run_id: int, status: str = "finished",
                   seen: dict[str, Any] | None = None) -> None:
        """Close a run; `seen` (what only the end of a run knows, such as the clocks seen)
        joins its environment."""
        with self.session() as s:
            run = s.get(Run, run_id)
            run.status = status
            run.finished_at = datetime.datetime.now(datetime.timezone.utc)
            if seen:
                run.environment = {**run.environment, **seen}

    # ---- problems, workloads, analyses, solutions -------------------------------------------

    def problem_id(self, address: str, problem: Problem, tier: str | None) -> int:
        return self._get_or_create(
            select(ProblemRow.id).where(ProblemRow.address == address),
            lambda: ProblemRow(address=address, name=problem.name, tier=tier,
                               op_type=problem.definition.op_type,
                               definition=problem.definition.to_dict()))

    def workload_id(self, problem_id: int, workload: Workload, axes: dict[str, int]) -> int:
        return self._workload_id(problem_id, workload.uuid, axes)

    def _workload_id(self, problem_id: int, uuid: str, axes: dict[str, Any]) -> int:
        return self._get_or_create(
            select(WorkloadRow.id).where(WorkloadRow.problem_id == problem_id,
                                         WorkloadRow.uuid == uuid),
            lambda: WorkloadRow(problem_id=problem_id, uuid=uuid, axes=axes))

    def save_analysis(self, workload_id: int, analysis: dict[str, Any]) -> None:
        """Keep one analysis per (workload, hardware, fp32 policy); a newer one replaces it."""

        def fill(row: AnalysisRow) -> None:
            row.t_sol_ms = analysis["t_sol_ms"]
            row.bound = analysis["bound"]
            row.flops = float(sum(analysis["flops"].values()))
            row.bytes_fused = analysis["bytes_fused"]
            row.details = analysis

        self._upsert(
            select(AnalysisRow).where(AnalysisRow.workload_id == workload_id,
                                      AnalysisRow.hardware == analysis["hardware"],
                                      AnalysisRow.fp32_policy == analysis["fp32_policy"]),
            lambda: AnalysisRow(workload_id=workload_id, hardware=analysis["hardware"],
                                fp32_policy=analysis["fp32_policy"]),
            fill)

    def has_analysis(self, workload_id: int, hardware: str, fp32_policy: str) -> bool:
        with self.session() as s:
            return s.scalar(select(AnalysisRow.id).where(
                AnalysisRow.workload_id == workload_id, AnalysisRow.hardware == hardware,
                AnalysisRow.fp32_policy == fp32_policy)) is not None

    def t_sol_ms(self, workload_ids: list[int], hardware: str,
                 fp32_policy: str) -> dict[int, float]:
        """T_SOL per workload id, for the workloads analysed on this profile and policy."""
        with self.session() as s:
            rows = s.execute(select(AnalysisRow.workload_id, AnalysisRow.t_sol_ms).where(
                AnalysisRow.workload_id.in_(workload_ids), AnalysisRow.hardware == hardware,
                AnalysisRow.fp32_policy == fp32_policy))
            return {workload_id: t_sol_ms for workload_id, t_sol_ms in rows}

    def solution_id(self, solution: dict[str, Any]) -> int:
        digest = solution_hash(solution)
        spec = solution.get("spec", {})
        return self._get_or_create(
            select(SolutionRow.id).where(SolutionRow.source_hash == digest),
            lambda: SolutionRow(source_hash=digest, name=solution.get("name", "?"),
                                definition=solution.get("definition", ""),
                                author=solution.get("author", ""),
                                languages=list(spec.get("languages", [])), solution=solution))

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

        def fill(row: TraceRow) -> None:
            row.run_id = run_id
            row.status = evaluation["status"]
            row.latency_ms = performance.get("latency_ms")
            row.reference_latency_ms = performance.get("reference_latency_ms")
            row.eager_ms = baseline.get("eager_ms")
            row.compile_ms = baseline.get("compile_ms")
            row.t_sol_ms = evaluation.get("t_sol_ms")
            row.sol_score = evaluation.get("sol_score")
            row.record = trace

        self._upsert(
            select(TraceRow).where(TraceRow.workload_id == workload_id,
                                   TraceRow.solution_id == solution_id,
                                   TraceRow.device == device, TraceRow.hardware == hardware),
            lambda: TraceRow(workload_id=workload_id, solution_id=solution_id, device=device,
                             hardware=hardware),
            fill)

    def find_traces(self, workload_ids: list[int], solution_ids: list[int], device: str,
                    hardware: str) -> list[TraceRow]:
        """The traces of these solutions on these workloads, measured on this hardware."""
        with self.session() as s:
            return list(s.scalars(select(TraceRow).where(
                TraceRow.workload_id.in_(workload_ids), TraceRow.solution_id.in_(solution_ids),
                TraceRow.device == device, TraceRow.hardware == hardware).order_by(TraceRow.id)))

    def traces(self) -> list[TraceRow]:
        with self.session() as s:
            return list(s.scalars(select(TraceRow).order_by(TraceRow.id)))

    def has_traces(self) -> bool:
        """Whether any trace is stored, without reading them."""
        with self.session() as s:
            return s.scalar(select(TraceRow.id).limit(1)) is not None

    def export_traces(self, path: Path) -> int:
        """Write every trace as FlashInfer-Trace JSONL; returns the count."""
        rows = self.traces()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            for row in rows:
                out.write(json.dumps(row.record, allow_nan=False) + "\n")
        return len(rows)

    def import_traces(self, path: Path) -> int:
        """Read FlashInfer-Trace JSONL (what `export_traces` or `solforge eval -o` writes) into
        the store; returns the count. The whole file is checked before anything is written.

        A trace names its problem and solution only by name, so each is filed under the stored
        problem of that definition name (else the bundled one, else a row that knows only the
        name), the stored solution of that name (else one known by name only), its workload's
        uuid, and the device and hardware its environment names. A trace already stored for the
        same (workload, solution, device, hardware) is replaced."""
        try:
            records = [trace.to_dict() for trace in read_traces(path)]
        except TraceFormatError as exc:
            raise StoreError(str(exc)) from None
        for record in records:
            evaluation = record["evaluation"]
            problem_id = self._problem_named(record["definition"])
            workload = record["workload"]
            workload_id = self._workload_id(problem_id, workload["uuid"],
                                            workload.get("axes", {}))
            solution_id = self._solution_named(record["solution"], record["definition"])
            hardware = evaluation["environment"]["hardware"]
            self.save_trace(None, workload_id, solution_id, trace_device(evaluation), hardware,
                            record)
        return len(records)

    def _problem_named(self, name: str) -> int:
        with self.session() as s:
            found = s.scalar(select(ProblemRow.id).where(ProblemRow.name == name)
                             .order_by(ProblemRow.id))
        if found is not None:
            return found
        folder = bundled_problem_dir(name)
        if folder is not None:
            return self.problem_id(address_of(folder), load_problem(folder), tier_of(folder))
        return self._get_or_create(
            select(ProblemRow.id).where(ProblemRow.address == name),
            lambda: ProblemRow(address=name, name=name, tier=None, op_type="",
                               definition={"name": name}))

    def _solution_named(self, name: str, definition: str) -> int:
        """The newest stored solution with this name for this definition, else a new row that
        knows only the two names (a trace carries no sources)."""
        with self.session() as s:
            found = s.scalar(select(SolutionRow.id).where(SolutionRow.name == name,
                                                          SolutionRow.definition == definition)
                             .order_by(SolutionRow.id.desc()))
        if found is not None:
            return found
        return self.solution_id({"name": name, "definition": definition})

    # ---- writes that race with other processes ------------------------------------------------

    def _get_or_create(self, find: Select, make: Callable[[], Base]) -> int:
        """The id that `find` selects, or the id of a new row from `make`. When another
        process inserts the same row between the look and the insert, the unique constraint
        rejects this one, and the winner's row is the answer."""
        with self.session() as s:
            found = s.scalar(find)
        if found is not None:
            return found
        try:
            with self.session() as s:
                row = make()
                s.add(row)
                s.flush()
                return row.id
        except IntegrityError:
            with self.session() as s:
                found = s.scalar(find)
            if found is None:  # the constraint that failed was not this row's key
                raise
            return found

    def _upsert(self, find: Select, make: Callable[[], RowT],
                fill: Callable[[RowT], None]) -> None:
        """Fill the row `find` selects, or a new one from `make`; when another process inserts
        the same row first, fill that one (the last write wins, as in one process)."""
        try:
            self._fill_row(find, make, fill)
        except IntegrityError:
            self._fill_row(find, make, fill)

    def _fill_row(self, find: Select, make: Callable[[], RowT],
                  fill: Callable[[RowT], None]) -> None:
        with self.session() as s:
            row = s.scalar(find)
            if row is None:
                row = make()
                s.add(row)
            fill(row)

    # ---- reading whole tables (the report) ---------------------------------------------------

    def rows(self, table: type[RowT]) -> list[RowT]:
        """Every row of one table (Run, ProblemRow, WorkloadRow, AnalysisRow, SolutionRow or
        TraceRow), oldest first, detached from the session: relationships are not loaded."""
        with self.session() as s:
            return list(s.scalars(select(table).order_by(table.id)))


def check_tables(url: str, found: set[str], create: bool) -> None:
    """Refuse a database that is not solforge's: it holds tables, none of them ours (another
    application's file); or, when nothing may be created, it holds none of ours at all."""
    ours = set(Base.metadata.tables)
    if found and not found & ours:
        shown = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise StoreError(f"{url} is not a solforge results store (it holds other tables: "
                         f"{shown}); name another with --db")
    if not create and not found & ours:
        raise StoreError(f"{url} holds no solforge results: record some with `solforge bench` "
                         "first, or name the store with --db")


def create_tables(engine: Engine) -> None:
    """Create the tables (and indexes) a database lacks. Each statement says IF NOT EXISTS, so
    processes that open a new SQLite file together do not collide; on PostgreSQL, where
    concurrent CREATE TABLEs can still collide in its catalog, they also take turns under an
    advisory lock."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": SCHEMA_LOCK_KEY})
        for table in Base.metadata.sorted_tables:
            connection.execute(CreateTable(table, if_not_exists=True))
            for index in table.indexes:
                connection.execute(CreateIndex(index, if_not_exists=True))
