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


class PromptComponent(Base):
    """One variant of one slot of the LLM proposer's meta-prompt (optimisation philosophy,
    strategy library, common pitfalls) and its bandit statistics, shared by every worker.
    A rewrite by the model is a new row whose `parent_id` is the variant it replaced."""

    __tablename__ = "prompt_components"
    __table_args__ = (UniqueConstraint("slot", "name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    slot: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("prompt_components.id"))
    generation: Mapped[int] = mapped_column(default=0)  # rewrites since a built-in variant
    active: Mapped[bool] = mapped_column(default=True)  # False once rewritten: no longer drawn
    pulls: Mapped[int] = mapped_column(default=0)  # outcomes of prompts that used it
    reward_sum: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)


class LLMCall(Base):
    """One request to a language model (its retries included): what was asked, what came back,
    what it cost, and, for a proposal, what became of the kernel it wrote."""

    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)
    purpose: Mapped[str] = mapped_column(String(16))  # "propose" or "rewrite"
    problem: Mapped[str | None] = mapped_column(String(256))
    model: Mapped[str] = mapped_column(String(256))
    base_url: Mapped[str] = mapped_column(String(512))
    prompt_hash: Mapped[str] = mapped_column(String(64))
    prompt: Mapped[list[Any]] = mapped_column()  # the chat messages sent
    components: Mapped[list[Any]] = mapped_column(default=list)  # PromptComponent ids used
    status: Mapped[str] = mapped_column(String(16))  # "ok" or "failed"
    error: Mapped[str | None] = mapped_column(Text)  # why it failed, after the last attempt
    attempts: Mapped[int] = mapped_column(default=1)  # HTTP requests made
    retries: Mapped[list[Any]] = mapped_column(default=list)  # [{attempt, reason, wait_s}]
    latency_s: Mapped[float | None] = mapped_column(Float)  # the answered request alone
    prompt_tokens: Mapped[int | None] = mapped_column()  # as the endpoint's usage reports
    completion_tokens: Mapped[int | None] = mapped_column()
    response: Mapped[str | None] = mapped_column(Text)
    parse_error: Mapped[str | None] = mapped_column(Text)  # a response with no usable code
    solution_name: Mapped[str | None] = mapped_column(String(256))
    reward: Mapped[float | None] = mapped_column(Float)  # the bandit's reward for the outcome


class Candidate(Base):
    """A kernel the optimizer proposed for a problem, judged by the harness: its fitness, its
    behaviour descriptor, and for a REWARD_HACK the evidence (such a candidate never becomes an
    elite)."""

    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("problem", "source_hash"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    problem: Mapped[str] = mapped_column(String(256))  # the problem's definition name
    source_hash: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256))
    proposer: Mapped[str] = mapped_column(String(256))  # "template:<name>" or "llm:<model>"
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id"))
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)  # a template's parameters
    solution: Mapped[dict[str, Any]] = mapped_column()
    status: Mapped[str] = mapped_column(String(32))  # worst status over its workloads
    fitness: Mapped[float | None] = mapped_column(Float)  # mean S (GPU) or geomean speedup (CPU)
    fitness_kind: Mapped[str] = mapped_column(String(16), default="sol_score")
    latency_ms: Mapped[float | None] = mapped_column(Float)  # median T_k of its workloads
    cell: Mapped[str | None] = mapped_column(String(128))  # "memory/compute/parallel/tile"
    descriptor: Mapped[dict[str, Any]] = mapped_column(default=dict)
    evidence: Mapped[str | None] = mapped_column(Text)  # the verdict's message when not PASSED
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)


class CandidateWorkload(Base):
    """One judged candidate's result on one workload: what per-shape composition picks
    winners from (the candidate's row keeps only the aggregate). A table of its own, not a
    column, so that stores written before it keep opening: the create-if-missing path adds it."""

    __tablename__ = "candidate_workloads"
    __table_args__ = (UniqueConstraint("candidate_id", "workload"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"))
    workload: Mapped[str] = mapped_column(String(128))  # the workload's uuid
    status: Mapped[str] = mapped_column(String(32))
    latency_ms: Mapped[float | None] = mapped_column(Float)  # T_k, PASSED only
    sol_score: Mapped[float | None] = mapped_column(Float)  # GPU only
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)


class ScreenedCandidate(Base):
    """A candidate the optimizer timed only briefly (its racing: harness/evaluate.py SCREEN)
    and never in full, as it did not come near the best: its fitness and per-workload times
    come from fewer timed calls than a full timing's. A table of its own, so that stores
    written before it keep opening."""

    __tablename__ = "screened_candidates"
    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), unique=True)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)


class ArchiveCell(Base):
    """One MAP-Elites cell of a problem's archive and its elite (the best fitness seen)."""

    __tablename__ = "archive_cells"
    __table_args__ = (UniqueConstraint("problem", "cell"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    problem: Mapped[str] = mapped_column(String(256))
    cell: Mapped[str] = mapped_column(String(128))
    elite_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"))
    fitness: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True),
                                                          default=utcnow)
