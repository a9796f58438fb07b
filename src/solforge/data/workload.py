"""One concrete instance of a definition: the lines of `workload.jsonl`.

A line is either a bare workload (`{"uuid", "axes", "inputs", "tolerance"}`, SOL-ExecBench) or a
workload trace (`{"definition", "workload": {...}}`, the flashinfer-trace dataset); both load.
Each workload is checked against its definition: every `var` axis bound, every constraint true,
every input given a source, scalar values for Python-scalar inputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solforge.data.definition import Definition
from solforge.data.expressions import ExpressionError, evaluate
from solforge.errors import ProblemError

INPUT_KINDS = ("random", "scalar", "safetensors", "custom")


@dataclass(frozen=True)
class InputSource:
    kind: str  # one of INPUT_KINDS
    value: int | float | bool | None = None  # scalar
    path: str | None = None  # safetensors, relative to the problem folder
    tensor_key: str | None = None  # safetensors


@dataclass(frozen=True)
class Tolerance:
    """SOL-ExecBench's per-workload bound: |out - ref| <= atol + rtol * |ref| elementwise."""

    max_atol: float = 1e-2
    max_rtol: float = 1e-2
    required_matched_ratio: float = 0.99
    max_error_cap: float | None = None
    allow_negative_inf: bool = False


@dataclass(frozen=True)
class Workload:
    uuid: str
    axes: dict[str, int]  # the var axes, as written
    inputs: dict[str, InputSource]
    tolerance: Tolerance = field(default_factory=Tolerance)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        inputs = {}
        for name, src in self.inputs.items():
            entry: dict[str, Any] = {"type": src.kind}
            if src.kind == "scalar":
                entry["value"] = src.value
            if src.kind == "safetensors":
                entry.update(path=src.path, tensor_key=src.tensor_key)
            inputs[name] = entry
        out: dict[str, Any] = {"uuid": self.uuid, "axes": dict(self.axes), "inputs": inputs}
        if self.tolerance != Tolerance():
            out["tolerance"] = {k: v for k, v in self.tolerance.__dict__.items()}
        out.update(self.extra)
        return out


def resolve_axes(definition: Definition, workload_axes: Mapping[str, int],
                 file: str | Path | None = None, where: str = "axes") -> dict[str, int]:
    """All axis values (const, var and expr) for one workload, constraints checked."""
    values: dict[str, int] = {}
    for axis in definition.axes.values():
        if axis.kind == "const":
            values[axis.name] = axis.value
        elif axis.kind == "var":
            if axis.name not in workload_axes:
                raise ProblemError(file, where, f"var axis {axis.name!r} is never bound")
            values[axis.name] = workload_axes[axis.name]
    pending = [a for a in definition.axes.values() if a.kind == "expr"]
    for _ in range(len(pending)):  # expressions may refer to each other; cycles were rejected
        for axis in list(pending):
            try:
                result = evaluate(axis.expression, values)
            except ExpressionError:
                continue
            if isinstance(result, bool) or not float(result).is_integer() or result < 0:
                raise ProblemError(file, f"{where} -> axes.{axis.name}",
                                   f"expression {axis.expression!r} gives {result!r}, "
                                   "not a non-negative integer")
            values[axis.name] = int(result)
            pending.remove(axis)
    if pending:
        raise ProblemError(file, f"axes.{pending[0].name}.expression",
                           f"cannot evaluate {pending[0].expression!r}")
    for i, text in enumerate(definition.constraints):
        try:
            ok = evaluate(text, values)
        except ExpressionError as exc:
            raise ProblemError(file, f"constraints[{i}]", str(exc)) from None
        if not ok:
            shown = ", ".join(f"{k}={values[k]}" for k in sorted(values))
            raise ProblemError(file, where, f"constraint {text!r} is violated ({shown})")
    return values


def parse_workload(data: Any, definition: Definition, file: str | Path | None = None,
                   line: int = 1) -> Workload:
    where = f"line {line}"
    if isinstance(data, Mapping) and "workload" in data and "uuid" not in data:
        data = data["workload"]  # a flashinfer-trace "workload trace"
    if not isinstance(data, Mapping):
        raise ProblemError(file, where, "expected a JSON object")
    uuid = data.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ProblemError(file, f"{where}.uuid", "missing or not a non-empty string")
    where = f"workload {uuid}"
    axes = data.get("axes")
    if not isinstance(axes, Mapping):
        raise ProblemError(file, f"{where}.axes", "must be an object of axis name -> integer")
    for name, value in axes.items():
        if name not in definition.axes:
            raise ProblemError(file, f"{where}.axes.{name}", "is not an axis of the definition")
        if definition.axes[name].kind != "var":
            raise ProblemError(file, f"{where}.axes.{name}",
                               f"is a {definition.axes[name].kind} axis; only var axes are bound")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            reason = f"{value!r} is not a non-negative integer"
            raise ProblemError(file, f"{where}.axes.{name}", reason)
    resolve_axes(definition, axes, file, f"{where}.axes")
    inputs = _parse_inputs(data.get("inputs"), definition, file, where)
    tolerance = _parse_tolerance(data.get("tolerance"), file, where)
    extra = {k: v for k, v in data.items() if k not in {"uuid", "axes", "inputs", "tolerance"}}
    return Workload(uuid, dict(axes), inputs, tolerance, extra)


def _parse_inputs(raw: Any, definition: Definition, file, where: str) -> dict[str, InputSource]:
    if not isinstance(raw, Mapping):
        raise ProblemError(file, f"{where}.inputs", "must be an object of input name -> source")
    for name in raw:
        if name not in definition.inputs:
            raise ProblemError(file, f"{where}.inputs.{name}", "is not an input of the definition")
    sources: dict[str, InputSource] = {}
    for name, spec in definition.inputs.items():
        if name not in raw:
            raise ProblemError(file, f"{where}.inputs", f"misses input {name!r}")
        sources[name] = _parse_source(raw[name], spec.is_scalar, definition, file,
                                      f"{where}.inputs.{name}")
    return sources


def _parse_source(raw: Any, is_scalar: bool, definition: Definition, file,
                  where: str) -> InputSource:
    if not isinstance(raw, Mapping) or raw.get("type") not in INPUT_KINDS:
        kind = raw.get("type") if isinstance(raw, Mapping) else raw
        raise ProblemError(file, f"{where}.type", f"{kind!r} is not one of {INPUT_KINDS}")
    kind = raw["type"]
    if kind == "scalar":
        value = raw.get("value")
        if not isinstance(value, (int, float, bool)):
            raise ProblemError(file, f"{where}.value", f"{value!r} is not an int, float or bool")
        return InputSource(kind, value=value)
    if is_scalar:
        raise ProblemError(file, where, f"a Python-scalar input needs type 'scalar', not {kind!r}")
    if kind == "safetensors":
        path, key = raw.get("path"), raw.get("tensor_key")
        if not isinstance(path, str) or not isinstance(key, str):
            raise ProblemError(file, where, "safetensors inputs need `path` and `tensor_key`")
        return InputSource(kind, path=path, tensor_key=key)
    if kind == "custom" and definition.custom_inputs_entrypoint is None:
        raise ProblemError(file, where,
                           "type 'custom' needs the definition's custom_inputs_entrypoint")
    return InputSource(kind)


def _parse_tolerance(raw: Any, file, where: str) -> Tolerance:
    if raw is None:
        return Tolerance()
    if not isinstance(raw, Mapping):
        raise ProblemError(file, f"{where}.tolerance", "must be an object")
    known = Tolerance.__dataclass_fields__
    for key, value in raw.items():
        if key not in known:
            raise ProblemError(file, f"{where}.tolerance.{key}", "unknown tolerance field")
        if key == "allow_negative_inf":
            if not isinstance(value, bool):
                raise ProblemError(file, f"{where}.tolerance.{key}", "must be true or false")
        elif value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise ProblemError(file, f"{where}.tolerance.{key}", f"{value!r} is not a number >= 0")
    ratio = raw.get("required_matched_ratio", 0.99)
    if ratio is not None and ratio > 1:
        raise ProblemError(file, f"{where}.tolerance.required_matched_ratio", "must be <= 1")
    return Tolerance(**{k: v for k, v in raw.items() if v is not None or k == "max_error_cap"})


def read_workloads(path: Path, definition: Definition) -> list[Workload]:
    workloads: list[Workload] = []
    seen: set[str] = set()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(path, f"line {number}", f"invalid JSON: {exc.msg}") from None
        workload = parse_workload(data, definition, path, number)
        if workload.uuid in seen:
            raise ProblemError(path, f"line {number}.uuid", f"duplicate uuid {workload.uuid!r}")
        seen.add(workload.uuid)
        workloads.append(workload)
    if not workloads:
        raise ProblemError(path, "<file>", "holds no workloads")
    return workloads
