"""A kernel problem's contract: the FlashInfer-Trace / SOL-ExecBench `definition.json`.

Parsed into frozen records with every field checked, so that a bad file fails here with the file,
the field and the reason, and nothing downstream has to re-validate. Unknown top-level fields are
kept (in `extra`) so files written by those projects load and save unchanged.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solforge.data.dtypes import DTYPES, DType
from solforge.data.expressions import ExpressionError, names_in, parse_expression
from solforge.errors import ProblemError
from solforge.pysyntax import parse_python

AXIS_KINDS = ("const", "var", "expr")


@dataclass(frozen=True)
class Axis:
    name: str
    kind: str  # "const" | "var" | "expr"
    value: int | None = None  # const only
    expression: str | None = None  # expr only
    description: str | None = None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[str, ...] | None  # None: a Python scalar; (): a 0-D tensor
    dtype: DType
    description: str | None = None

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


@dataclass(frozen=True)
class Definition:
    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    constraints: tuple[str, ...] = ()
    custom_inputs_entrypoint: str | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def var_axes(self) -> list[str]:
        return [a.name for a in self.axes.values() if a.kind == "var"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, in the field order those projects write."""
        out: dict[str, Any] = {"name": self.name, "op_type": self.op_type}
        if self.description is not None:
            out["description"] = self.description
        if self.tags:
            out["tags"] = list(self.tags)
        out["axes"] = {a.name: _axis_dict(a) for a in self.axes.values()}
        if self.constraints:
            out["constraints"] = list(self.constraints)
        if self.custom_inputs_entrypoint is not None:
            out["custom_inputs_entrypoint"] = self.custom_inputs_entrypoint
        out["inputs"] = {t.name: _tensor_dict(t) for t in self.inputs.values()}
        out["outputs"] = {t.name: _tensor_dict(t) for t in self.outputs.values()}
        out["reference"] = self.reference
        out.update(self.extra)
        return out


def _axis_dict(axis: Axis) -> dict[str, Any]:
    out: dict[str, Any] = {"type": axis.kind}
    if axis.kind == "const":
        out["value"] = axis.value
    if axis.kind == "expr":
        out["expression"] = axis.expression
    if axis.description is not None:
        out["description"] = axis.description
    return out


def _tensor_dict(spec: TensorSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "shape": None if spec.shape is None else list(spec.shape),
        "dtype": spec.dtype.name,
    }
    if spec.description is not None:
        out["description"] = spec.description
    return out


_KNOWN_FIELDS = {
    "name", "op_type", "description", "tags", "axes", "constraints", "custom_inputs_entrypoint",
    "inputs", "outputs", "reference",
}


def parse_definition(data: Any, file: str | Path | None = None) -> Definition:
    """Check every field of a definition object and build the record."""
    if not isinstance(data, Mapping):
        raise ProblemError(file, "<root>", f"expected a JSON object, got {type(data).__name__}")
    name = _string(data, "name", file)
    op_type = data.get("op_type") or "unknown"
    if not isinstance(op_type, str):
        raise ProblemError(file, "op_type", "must be a string")
    axes = _parse_axes(data.get("axes"), file)
    inputs = _parse_tensors(data.get("inputs"), "inputs", axes, file)
    outputs = _parse_tensors(data.get("outputs"), "outputs", axes, file)
    overlap = set(inputs) & set(outputs)
    if overlap:
        raise ProblemError(file, "outputs", f"names also used as inputs: {sorted(overlap)}")
    clash = set(inputs) & set(axes)
    if clash:
        raise ProblemError(file, "inputs", f"names also used as axes: {sorted(clash)}")
    reference = _string(data, "reference", file)
    top_level = _top_level_functions(reference, file)
    if "run" not in top_level:
        raise ProblemError(file, "reference", "defines no top-level function `run`")
    entry = data.get("custom_inputs_entrypoint")
    if entry is not None and (not isinstance(entry, str) or entry not in top_level):
        raise ProblemError(file, "custom_inputs_entrypoint",
                           f"{entry!r} is not a top-level function of the reference")
    constraints = _parse_constraints(data.get("constraints"), axes, file)
    description = data.get("description")
    tags = data.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ProblemError(file, "tags", "must be a list of strings")
    extra = {k: v for k, v in data.items() if k not in _KNOWN_FIELDS}
    return Definition(
        name=name, op_type=op_type, axes=axes, inputs=inputs, outputs=outputs,
        reference=reference, constraints=constraints, custom_inputs_entrypoint=entry,
        description=description if isinstance(description, str) else None,
        tags=tuple(tags), extra=extra,
    )


def _string(data: Mapping, key: str, file) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ProblemError(file, key, "missing or not a non-empty string")
    return value


def _parse_axes(raw: Any, file) -> dict[str, Axis]:
    if not isinstance(raw, Mapping) or not raw:
        raise ProblemError(file, "axes", "must be a non-empty object of axis name -> spec")
    axes: dict[str, Axis] = {}
    for name, spec in raw.items():
        axes[name] = _parse_axis(name, spec, file)
    for axis in axes.values():
        if axis.kind == "expr":
            unknown = names_in(axis.expression) - set(axes)
            if unknown:
                raise ProblemError(file, f"axes.{axis.name}.expression",
                                   f"refers to unknown axes {sorted(unknown)}")
    _check_expr_cycles(axes, file)
    return axes


def _parse_axis(name: str, spec: Any, file) -> Axis:
    where = f"axes.{name}"
    if not isinstance(spec, Mapping):
        raise ProblemError(file, where, "must be an object with a `type`")
    kind = spec.get("type")
    if kind not in AXIS_KINDS:
        raise ProblemError(file, f"{where}.type", f"{kind!r} is not one of {AXIS_KINDS}")
    description = spec.get("description")
    if kind == "const":
        value = spec.get("value")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProblemError(file, f"{where}.value", f"{value!r} is not a non-negative integer")
        return Axis(name, kind, value=value, description=description)
    if kind == "expr":
        expression = spec.get("expression")
        try:
            parse_expression(expression)
        except ExpressionError as exc:
            raise ProblemError(file, f"{where}.expression", str(exc)) from None
        return Axis(name, kind, expression=expression, description=description)
    return Axis(name, kind, description=description)


def _check_expr_cycles(axes: dict[str, Axis], file) -> None:
    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in stack:
            cycle = " -> ".join((*stack, name))
            raise ProblemError(file, f"axes.{name}.expression", f"circular definition {cycle}")
        axis = axes[name]
        if axis.kind == "expr":
            for dep in names_in(axis.expression):
                visit(dep, (*stack, name))

    for name in axes:
        visit(name, ())


def _parse_tensors(raw: Any, section: str, axes: dict[str, Axis], file) -> dict[str, TensorSpec]:
    if not isinstance(raw, Mapping) or (section == "outputs" and not raw):
        raise ProblemError(file, section, "must be an object of tensor name -> {shape, dtype}")
    specs: dict[str, TensorSpec] = {}
    for name, spec in raw.items():
        where = f"{section}.{name}"
        if not isinstance(spec, Mapping):
            raise ProblemError(file, where, "must be an object with `shape` and `dtype`")
        if "shape" not in spec:
            raise ProblemError(file, f"{where}.shape", "missing (use null for a Python scalar)")
        shape = spec["shape"]
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(s, str) for s in shape):
                raise ProblemError(file, f"{where}.shape", "must be a list of axis names or null")
            for axis_name in shape:
                if axis_name not in axes:
                    raise ProblemError(file, f"{where}.shape",
                                       f"axis {axis_name!r} is not declared in `axes`")
            shape = tuple(shape)
        dtype_name = spec.get("dtype")
        if dtype_name not in DTYPES:
            raise ProblemError(file, f"{where}.dtype",
                               f"unknown dtype {dtype_name!r} (known: {', '.join(DTYPES)})")
        specs[name] = TensorSpec(name, shape, DTYPES[dtype_name], spec.get("description"))
    return specs


def _parse_constraints(raw: Any, axes: dict[str, Axis], file) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProblemError(file, "constraints", "must be a list of expressions")
    for i, text in enumerate(raw):
        try:
            unknown = names_in(text) - set(axes)
        except ExpressionError as exc:
            raise ProblemError(file, f"constraints[{i}]", str(exc)) from None
        if unknown:
            reason = f"refers to unknown axes {sorted(unknown)}"
            raise ProblemError(file, f"constraints[{i}]", reason)
    return tuple(raw)


def _top_level_functions(source: str, file) -> set[str]:
    try:
        module = parse_python(source)
    except SyntaxError as exc:
        reason = f"syntax error at line {exc.lineno}: {exc.msg}"
        raise ProblemError(file, "reference", reason) from None
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names
