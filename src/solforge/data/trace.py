"""Trace records: what one evaluation of one solution on one workload found.

The shape is FlashInfer-Trace's (SOL-ExecBench docs/trace.md): `definition`, `solution`,
`workload`, and `evaluation{status, log, correctness, performance, environment, timestamp}`, with
its nullable rule (correctness only for PASSED and INCORRECT_NUMERICAL, performance only for
PASSED), so files written here load in those tools. solforge's additions sit beside the standard
fields of `evaluation` under names no standard field uses: `t_sol_ms`, `sol_floor_ms`,
`sol_bound`, `sol_hardware`, `sol_score`, `timing` (method, device, median/min/max/spread,
clocks), `baseline` (eager and torch.compile latencies, which one is T_b), `evidence` (what a
REWARD_HACK verdict rests on), `notes` and `build_seconds`. Readers of the standard schema
ignore them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from solforge.errors import SolforgeError


class Status(str, Enum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    REWARD_HACK = "REWARD_HACK"
    INVALID_REFERENCE = "INVALID_REFERENCE"


def parse_status(value: Any) -> Status:
    """A status name from the worker; anything unknown counts as a RUNTIME_ERROR."""
    try:
        return Status(value)
    except ValueError:
        return Status.RUNTIME_ERROR


@dataclass(frozen=True)
class Correctness:
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    has_nan: bool = False
    has_inf: bool = False
    matched_ratio: float | None = None  # solforge: fraction of elements within tolerance


@dataclass(frozen=True)
class Performance:
    latency_ms: float  # solforge reports the median of the timed iterations
    reference_latency_ms: float  # T_b, the baseline the speedup and the SOL score use
    speedup_factor: float


@dataclass(frozen=True)
class Environment:
    hardware: str
    libs: dict[str, str] = field(default_factory=dict)
    sandbox: dict[str, str] = field(default_factory=dict)  # protection -> what, or why not


@dataclass(frozen=True)
class TimingReport:
    """How the candidate's latency was measured (solforge addition)."""

    method: str  # kernel | events | graph | cpu
    device: str  # "cuda" or "cpu": CPU timings are never comparable with GPU ones
    label: str  # one line for people: what the number means
    iterations: int
    warmup: int
    median_ms: float
    min_ms: float
    max_ms: float
    spread: float
    sm_clock_mhz: Any = None
    mem_clock_mhz: Any = None
    kernels_per_iteration: float | None = None
    first_call_ms: float | None = None  # the first call, JIT and lazy setup included
    verified_iterations: tuple[int, ...] = ()  # timed iterations whose outputs were re-checked
    handover: str = ""  # how inputs and outputs crossed: cuda_ipc, shared_memory or pipe (why)


@dataclass(frozen=True)
class BaselineReport:
    """T_b: the reference timed the same way (solforge addition)."""

    chosen: str  # "eager" or "compile"
    latency_ms: float
    eager_ms: float | None = None
    compile_ms: float | None = None
    cached: bool = False
    library: str | None = None  # the library baseline timed beside them (eval --library)
    library_ms: float | None = None  # its time; None where it did not run or failed


@dataclass(frozen=True)
class Evaluation:
    status: Status
    environment: Environment
    timestamp: str
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None
    t_sol_ms: float | None = None
    sol_floor_ms: float | None = None
    sol_bound: str | None = None
    sol_hardware: str | None = None  # the hardware profile T_SOL was computed for
    sol_score: float | None = None
    library_score: float | None = None  # S with T_b = the library baseline's time
    timing: TimingReport | None = None
    baseline: BaselineReport | None = None
    evidence: str | None = None
    notes: tuple[str, ...] = ()  # why a score is missing, and the like
    build_seconds: float | None = None  # the compile step (0 when the build was cached)

    def __post_init__(self) -> None:
        keeps_correctness = self.status in (Status.PASSED, Status.INCORRECT_NUMERICAL)
        if (self.correctness is not None) != keeps_correctness:
            raise ValueError(f"{self.status.value}: correctness must be "
                             f"{'present' if keeps_correctness else 'absent'}")
        if (self.performance is not None) != (self.status is Status.PASSED):
            raise ValueError(f"{self.status.value}: performance is only for PASSED")


@dataclass(frozen=True)
class Trace:
    definition: str
    solution: str
    workload: dict[str, Any]
    evaluation: Evaluation

    @property
    def status(self) -> Status:
        return self.evaluation.status

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        raw = dict(data["evaluation"])
        known = {f.name for f in fields(Evaluation)}
        evaluation = Evaluation(
            **{k: v for k, v in raw.items() if k in known and k not in _NESTED},
            status=Status(raw["status"]),
            environment=Environment(**raw["environment"]),
            correctness=_build(Correctness, raw.get("correctness")),
            performance=_build(Performance, raw.get("performance")),
            timing=_build(TimingReport, raw.get("timing")),
            baseline=_build(BaselineReport, raw.get("baseline")),
            notes=tuple(raw.get("notes", ())),
        )
        return cls(data["definition"], data.get("solution", ""), data["workload"], evaluation)


_NESTED = {"status", "environment", "correctness", "performance", "timing", "baseline", "notes"}


def _build(record: type, raw: dict[str, Any] | None) -> Any:
    if raw is None:
        return None
    known = {f.name for f in fields(record)}
    values = {k: v for k, v in raw.items() if k in known}
    if record is TimingReport:
        values["verified_iterations"] = tuple(values.get("verified_iterations", ()))
    return record(**values)


def _json_safe(value: Any) -> Any:
    """Enums as their values, tuples as lists, NaN and infinities as null (strict JSON)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def trace_line(trace: Trace) -> str:
    return json.dumps(trace.to_dict(), allow_nan=False)


def append_traces(path: str | Path, traces: list[Trace]) -> None:
    """Append one JSON line per trace (the FlashInfer-Trace JSONL layout)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        for trace in traces:
            out.write(trace_line(trace) + "\n")


class TraceFormatError(SolforgeError):
    """A trace file that cannot be read: `file:line: reason`."""


def read_traces(path: str | Path) -> list[Trace]:
    """The records of a FlashInfer-Trace JSONL file, each checked against the trace format: the
    one reader of trace files (`solforge import-traces` and the tests alike)."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(f"{path}: no such file")
    traces = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            traces.append(Trace.from_dict(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TraceFormatError(f"{path}:{number}: not a trace record: {exc!r}") from None
    return traces
