"""A problem = a definition plus its workloads, loaded from a folder."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from solforge.data.definition import Definition, TensorSpec, parse_definition
from solforge.data.workload import Workload, read_workloads, resolve_axes
from solforge.errors import ProblemError

DEFINITION_FILE = "definition.json"
WORKLOAD_FILES = ("workload.jsonl", "workloads.jsonl")


@dataclass(frozen=True)
class Problem:
    definition: Definition
    workloads: tuple[Workload, ...]
    root: Path  # the folder: safetensors paths are relative to it

    @property
    def name(self) -> str:
        return self.definition.name

    def axes(self, workload: Workload) -> dict[str, int]:
        return resolve_axes(self.definition, workload.axes)

    def workload(self, uuid: str) -> Workload:
        """The workload with this uuid, or the only one whose uuid starts with it."""
        exact = [w for w in self.workloads if w.uuid == uuid]
        matches = exact or [w for w in self.workloads if w.uuid.startswith(uuid)]
        if len(matches) == 1:
            return matches[0]
        reason = f"no workload {uuid!r}" if not matches else f"{uuid!r} matches several workloads"
        raise ProblemError(self.root / WORKLOAD_FILES[0], "uuid", reason)

    def input_elements(self, workload: Workload) -> int:
        """Logical elements over all tensor inputs: a size to order workloads by."""
        axes = self.axes(workload)
        total = 0
        for spec in self.definition.inputs.values():
            shape = tensor_shape(spec, axes)
            total += math.prod(shape) if shape is not None else 0
        return total

    def smallest_workload(self) -> Workload:
        return min(self.workloads, key=self.input_elements)


def tensor_shape(spec: TensorSpec, axes: dict[str, int]) -> tuple[int, ...] | None:
    """Logical shape of a tensor for resolved axis values (None for a Python scalar)."""
    if spec.shape is None:
        return None
    return tuple(axes[name] for name in spec.shape)


def load_problem(folder: str | Path) -> Problem:
    folder = Path(folder)
    definition_path = folder / DEFINITION_FILE
    if not definition_path.is_file():
        raise ProblemError(folder, DEFINITION_FILE, "no such file in the problem folder")
    try:
        data = json.loads(definition_path.read_text())
    except json.JSONDecodeError as exc:
        reason = f"invalid JSON: {exc.msg}"
        raise ProblemError(definition_path, f"line {exc.lineno}", reason) from None
    definition = parse_definition(data, definition_path)
    workload_path = next((folder / n for n in WORKLOAD_FILES if (folder / n).is_file()), None)
    if workload_path is None:
        raise ProblemError(folder, WORKLOAD_FILES[0], "no such file in the problem folder")
    workloads = read_workloads(workload_path, definition)
    return Problem(definition, tuple(workloads), folder)
