"""FlashInfer-Bench's dataset layout (a "trace set"), read and written unchanged.

    <root>/definitions/<op_type>/<definition>.json
    <root>/workloads/<op_type>/<definition>.jsonl     one workload trace a line:
                                                       {definition, solution: null, workload,
                                                        evaluation: null}
    <root>/solutions/<op_type>/<definition>/<solution>.json
    <root>/traces/<op_type>/<definition>.jsonl        one evaluated trace a line
    <root>/blob/...                                    safetensors inputs (left where they are)

Reading keeps every record as the JSON object it was and the path it came from, so writing the
set back reproduces the same files (as JSON, not byte for byte: keys keep their order, spacing is
ours). solforge's own records are added through the same layout: a problem's definition and
workloads, a solution (its spec gains FlashInfer-Bench's single `language` and
`target_hardware` beside solforge's `languages`), and traces. Two statuses are solforge's alone
(REWARD_HACK, INVALID_REFERENCE); FlashInfer-Bench's schema has no such value, so a trace
carrying one is written as RUNTIME_ERROR with the original under `evaluation.solforge_status`
(ignored by its reader) and restored on reading here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solforge.data.solution import Solution
from solforge.data.trace import Trace
from solforge.errors import ProblemError
from solforge.problem.problem import Problem

SECTIONS = ("definitions", "workloads", "solutions", "traces")
# Statuses FlashInfer-Bench's EvaluationStatus enum knows.
FIB_STATUSES = frozenset({"PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
                          "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT"})
SOLFORGE_STATUS = "solforge_status"
# solforge language -> FlashInfer-Bench's `language` (python, triton, cpp, cuda, tilelang).
FIB_LANGUAGE = {"pytorch": "python", "python": "python", "triton": "triton", "cpp": "cpp",
                "c++": "cpp", "tilelang": "tilelang", "cute_dsl": "python", "cutile": "python",
                "cudnn_frontend": "python"}


@dataclass
class TraceSet:
    """Records by the path (relative to the root) of the file that holds them, in file order."""

    root: Path
    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def records(self, section: str) -> list[dict[str, Any]]:
        return [r for path, rs in sorted(self.files.items())
                if path.split("/")[0] == section for r in rs]

    def definition_names(self) -> list[str]:
        return [d["name"] for d in self.records("definitions")]


def read_trace_set(root: str | Path) -> TraceSet:
    """Every record under the four sections; a file that is not JSON is a ProblemError."""
    root = Path(root)
    if not any((root / s).is_dir() for s in SECTIONS):
        raise ProblemError(root, "<folder>", f"no {', '.join(SECTIONS)} folder: not a "
                                             "FlashInfer-Bench trace set")
    trace_set = TraceSet(root)
    for section in SECTIONS:
        folder = root / section
        for file in sorted(folder.rglob("*.json*")) if folder.is_dir() else []:
            trace_set.files[file.relative_to(root).as_posix()] = _read(file)
    return trace_set


def write_trace_set(trace_set: TraceSet, root: str | Path | None = None) -> Path:
    """Write every file of the set under `root` (default: where it was read from)."""
    root = Path(root) if root is not None else trace_set.root
    for relative, records in trace_set.files.items():
        _write(root / relative, records)
    return root


def add_problem(trace_set: TraceSet, problem: Problem) -> None:
    """The definition and its workloads (as workload traces) at their layout paths."""
    definition = problem.definition.to_dict()
    op_type = _op_type(definition)
    trace_set.files[f"definitions/{op_type}/{problem.name}.json"] = [definition]
    trace_set.files[f"workloads/{op_type}/{problem.name}.jsonl"] = [
        {"definition": problem.name, "solution": None, "workload": w.to_dict(),
         "evaluation": None} for w in problem.workloads]


def add_solution(trace_set: TraceSet, solution: Solution, op_type: str) -> None:
    data = solution.to_dict()
    spec = data["spec"]
    spec.setdefault("language", fib_language(solution.languages))
    spec.setdefault("target_hardware", ["LOCAL"])
    trace_set.files[f"solutions/{op_type}/{solution.definition}/{solution.name}.json"] = [data]


def add_traces(trace_set: TraceSet, traces: Iterable[Trace], op_type: str) -> None:
    """Append traces to traces/<op_type>/<definition>.jsonl."""
    for trace in traces:
        path = f"traces/{op_type}/{trace.definition}.jsonl"
        trace_set.files.setdefault(path, []).append(to_fib_trace(trace.to_dict()))


def to_fib_trace(data: dict[str, Any]) -> dict[str, Any]:
    evaluation = data.get("evaluation")
    if not isinstance(evaluation, dict) or evaluation.get("status") in FIB_STATUSES:
        return data
    status = evaluation["status"]
    log = f"{status}: {evaluation.get('evidence') or evaluation.get('log') or ''}".strip()
    return {**data, "evaluation": {**evaluation, "status": "RUNTIME_ERROR", "log": log,
                                   "correctness": None, "performance": None,
                                   SOLFORGE_STATUS: status}}


def traces_of(trace_set: TraceSet) -> list[Trace]:
    """The evaluated traces as solforge records, solforge's own statuses restored."""
    found = []
    for data in trace_set.records("traces"):
        evaluation = dict(data["evaluation"])
        original = evaluation.pop(SOLFORGE_STATUS, None)
        if original is not None:
            evaluation["status"] = original
            evaluation["log"] = evaluation.get("log", "").removeprefix(f"{original}: ")
        found.append(Trace.from_dict({**data, "evaluation": evaluation}))
    return found


def fib_language(languages: tuple[str, ...]) -> str:
    first = languages[0]
    return FIB_LANGUAGE.get(first, "cuda")  # cuda_cpp, cuda, cutlass, cudnn, cublas


def _op_type(definition: dict[str, Any]) -> str:
    op_type = str(definition.get("op_type") or "unknown")
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in op_type)


def _read(file: Path) -> list[dict[str, Any]]:
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(file, "<file>", f"cannot be read: {exc}") from None
    if file.suffix == ".json":
        return [_decode(text, file, 1)]
    return [_decode(line, file, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _decode(text: str, file: Path, line: int) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(file, f"line {line + exc.lineno - 1}",
                           f"invalid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ProblemError(file, f"line {line}", "expected a JSON object")
    return value


def _write(file: Path, records: list[dict[str, Any]]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    if file.suffix == ".json":
        file.write_text(json.dumps(records[0], indent=2) + "\n")
    else:
        file.write_text("".join(json.dumps(r) + "\n" for r in records))
