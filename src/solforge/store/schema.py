"""The results store's tables: runs, problems, workloads, analyses, solutions and traces.

One row per fact, so a bench that is interrupted keeps everything it measured and a rerun can
ask what is already there. SQLite by default, PostgreSQL by URL (SQLAlchemy 2 ORM).
"""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, DateTime, Float, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}


class Run(Base):
    """One invocation of `solforge bench` (or of anything else that records traces)."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16), default="running")  # running|finished|...
    command: Mapped[str] = mapped_column(Text, default="")
    device: Mapped[str] = mapped_column(String(16))  # "cuda" or "cpu"
    hardware: Mapped[str] = mapped_column(String(128))  # the profile T_SOL was priced on
    environment: Mapped[dict[str, Any]] = mapped_column(default=dict)  # GPU, driver, versions
    traces: Mapped[list[TraceRow]] = relationship(back_populates="run")


class ProblemRow(Base):
    __tablename__ = "problems"
    id: Mapped[int] = mapped_column(primary_key=True)
    address: Mapped[str] = mapped_column(String(256), unique=True)  # tier/name or a path
    name: Mapped[str] = mapped_column(String(256))
    tier: Mapped[str | None] = mapped_column(String(16))
    op_type: Mapped[str] = mapped_column(String(128))
    definition: Mapped[dict[str, Any]] = mapped_column()
    workloads: Mapped[list[WorkloadRow]] = relationship(back_populates="problem")


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("problem_id", "uuid"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    uuid: Mapped[str] = mapped_column(String(128))
    axes: Mapped[dict[str, Any]] = mapped_column()
    problem: Mapped[ProblemRow] = relationship(back_populates="workloads")


class AnalysisRow(Base):
    """The speed-of-light analysis of one workload on one hardware profile."""

    __tablename__ = "analyses"
    __table_args__ = (UniqueConstraint("workload_id", "hardware", "fp32_policy"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    hardware: Mapped[str] = mapped_column(String(128))
    fp32_policy: Mapped[str] = mapped_column(String(16))
    t_sol_ms: Mapped[float] = mapped_column(Float)
    bound: Mapped[str] = mapped_column(String(16))
    flops: Mapped[float] = mapped_column(Float)  # all units together
    bytes_fused: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column()  # the whole Analysis.to_json()


class SolutionRow(Base):
    """A candidate kernel, identified by the hash of its sources; the reference baselines are
    recorded as the pseudo-solutions `reference:eager` and `reference:compile`."""

    __tablename__ = "solutions"
    id: Mapped[int] = mapped_column(primary_key=True)
    source_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(256))
    definition: Mapped[str] = mapped_column(String(256))
    author: Mapped[str] = mapped_column(String(256), default="")
    languages: Mapped[list[Any]] = mapped_column(default=list)
    solution: Mapped[dict[str, Any]] = mapped_column()  # the solution JSON


class TraceRow(Base):
    """One evaluation of one solution on one workload in one run (a FlashInfer-Trace record)."""

    __tablename__ = "traces"
    __table_args__ = (UniqueConstraint("workload_id", "solution_id", "device", "hardware"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    solution_id: Mapped[int] = mapped_column(ForeignKey("solutions.id"))
    device: Mapped[str] = mapped_column(String(16))
    hardware: Mapped[str] = mapped_column(String(128))  # the GPU (or "cpu") it was measured on
    status: Mapped[str] = mapped_column(String(32))
    latency_ms: Mapped[float | None] = mapped_column(Float)
    reference_latency_ms: Mapped[float | None] = mapped_column(Float)
    eager_ms: Mapped[float | None] = mapped_column(Float)
    compile_ms: Mapped[float | None] = mapped_column(Float)
    t_sol_ms: Mapped[float | None] = mapped_column(Float)
    sol_score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)
    record: Mapped[dict[str, Any]] = mapped_column()  # the full trace
    run: Mapped[Run | None] = relationship(back_populates="traces")
