"""What the LLM proposer is given and what it hands back: parents, attempts, proposals.

A Parent is an archive elite shown to the model as a starting point. An LlmAttempt is the feedback
of one earlier candidate: the harness's verdict over its workloads (status, the compiler's or
the runtime's message, mismatch statistics, times, REWARD_HACK evidence), or the reason its
response held no usable code. A Proposal is one new candidate with what the bandit needs to
learn from its outcome.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from solforge.data.trace import Status, Trace
from solforge.score.rank import rate_traces

PARSE_ERROR = "PARSE_ERROR"  # an attempt whose response held no usable code (not a harness status)


@dataclass(frozen=True)
class Parent:
    name: str
    solution: dict[str, Any]  # the solution JSON
    sol_score: float | None  # S, the mean over its workloads; None where no T_SOL score exists
    latency_ms: float | None  # T_k, the mean over its workloads
    descriptor: Mapping[str, str] = field(default_factory=dict)  # its archive cell's features

    def sources(self) -> list[tuple[str, str]]:
        return [(s["path"], s["content"]) for s in self.solution.get("sources", [])]


@dataclass(frozen=True)
class LlmAttempt:
    solution: str  # the candidate's name
    status: str  # PASSED, its first failure's harness status (REWARD_HACK first), PARSE_ERROR
    message: str = ""  # that failure's log or REWARD_HACK evidence, or the parse error
    source: str = ""  # its entry file, shown to the model when the budget allows
    workloads: int = 0
    passed: int = 0
    correctness: Mapping[str, Any] | None = None  # the worst workload's mismatch statistics
    latency_ms: float | None = None  # T_k, the mean over its workloads, when all passed
    baseline_ms: float | None = None  # T_b, the mean over the same workloads
    sol_score: float | None = None  # S, the mean, when every workload has one
    profile: str = ""  # Nsight Compute's metrics of its kernels (forge/ncu.py), when measured

    @property
    def all_passed(self) -> bool:
        return self.workloads > 0 and self.passed == self.workloads


@dataclass(frozen=True)
class Proposal:
    solution: dict[str, Any] | None  # None when the response held no usable code
    call_id: int  # the LLMCall row
    components: tuple[int, ...]  # the PromptComponent ids the prompt used
    parent: Parent | None  # the best parent shown: the one an improvement is measured against
    parse_error: str | None = None

    @property
    def name(self) -> str:
        return self.solution["name"] if self.solution is not None else f"llm-call-{self.call_id}"


def parent_rank(parent: Parent) -> tuple[float, float]:
    """A sort key, best first: higher S, then lower T_k; unknown values last."""
    score = parent.sol_score if parent.sol_score is not None else -math.inf
    latency = parent.latency_ms if parent.latency_ms is not None else math.inf
    return (-score, latency)


def attempt_from_traces(solution: Mapping[str, Any], traces: Sequence[Trace]) -> LlmAttempt:
    """The feedback of one evaluated candidate: its traces, one per workload, summed up."""
    if not traces:
        raise ValueError(f"{solution.get('name')}: no traces; evaluate the solution first")
    failures = [t for t in traces if t.status is not Status.PASSED]
    failures.sort(key=lambda t: t.status is not Status.REWARD_HACK)  # a hack is told first
    passed = [t for t in traces if t.status is Status.PASSED]
    first = failures[0].evaluation if failures else None
    status = first.status.value if first else Status.PASSED.value
    message = (first.evidence or first.log) if first else ""
    all_passed = not failures
    return LlmAttempt(
        solution=str(solution.get("name", "?")), status=status, message=message or "",
        source=entry_source(solution), workloads=len(traces), passed=len(passed),
        correctness=_worst_correctness(traces),
        latency_ms=_mean([t.evaluation.performance.latency_ms for t in passed], all_passed),
        baseline_ms=_mean([t.evaluation.performance.reference_latency_ms for t in passed],
                          all_passed),
        sol_score=_sol_score(traces, all_passed))


def attempt_from_proposal(proposal: Proposal) -> LlmAttempt:
    """The feedback of a proposal whose response held no usable code."""
    return LlmAttempt(solution=proposal.name, status=PARSE_ERROR,
                      message=proposal.parse_error or "")


def entry_source(solution: Mapping[str, Any]) -> str:
    """The content of the solution's entry file ("" when it has none)."""
    entry_file = str(solution.get("spec", {}).get("entry_point", "")).partition("::")[0]
    for source in solution.get("sources", []):
        if source.get("path") == entry_file:
            return source.get("content", "")
    return ""


def _worst_correctness(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """The mismatch statistics of the workload with the largest absolute error."""
    checked = [t.evaluation.correctness for t in traces if t.evaluation.correctness is not None]
    if not checked:
        return None
    worst = max(checked, key=lambda c: c.max_absolute_error)
    return {"max_absolute_error": worst.max_absolute_error,
            "max_relative_error": worst.max_relative_error,
            "matched_ratio": worst.matched_ratio, "has_nan": worst.has_nan,
            "has_inf": worst.has_inf}


def _sol_score(traces: Sequence[Trace], all_passed: bool) -> float | None:
    """S as solforge.score.rank has it, only when every workload passed and has one."""
    if not all_passed or any(t.evaluation.sol_score is None for t in traces):
        return None
    return rate_traces(traces).sol_score


def _mean(values: list[float | None], all_passed: bool) -> float | None:
    """The mean, only when every workload passed and has the value: a mean over some
    workloads cannot be compared with one over all of them."""
    if not all_passed or not values or any(v is None for v in values):
        return None
    return statistics.fmean(values)
