"""What a `run` returns, matched against the definition's outputs."""

from __future__ import annotations

from typing import Any

import torch

from solforge.data.definition import Definition
from solforge.data.dtypes import storage_shape


class OutputMismatch(ValueError):
    """The returned values do not fit the definition; `kind` is "shape", "dtype" or "count"."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


def as_output_list(result: Any, definition: Definition) -> list[Any]:
    """A returned tensor, tuple, list or dict (by output name), as a list in definition order."""
    names = list(definition.outputs)
    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise OutputMismatch("count", f"returned dict misses outputs {missing}")
        return [result[n] for n in names]
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(values) != len(names):
        raise OutputMismatch("count", f"returned {len(values)} values for {len(names)} outputs "
                                      f"({', '.join(names)})")
    return values


def check_outputs(values: list[Any], definition: Definition,
                  shapes: dict[str, tuple[int, ...] | None]) -> None:
    """Exact type, storage shape and dtype of each output; raises OutputMismatch."""
    for value, (name, spec) in zip(values, definition.outputs.items()):
        if spec.shape is None:
            if isinstance(value, torch.Tensor):
                raise OutputMismatch("dtype", f"output {name!r} should be a Python scalar")
            continue
        if type(value) is not torch.Tensor:
            raise OutputMismatch("dtype", f"output {name!r} is {type(value).__name__}, "
                                          "not exactly torch.Tensor")
        expected = storage_shape(shapes[name], spec.dtype)
        if tuple(value.shape) != expected:
            raise OutputMismatch("shape", f"output {name!r} has shape {tuple(value.shape)}, "
                                          f"expected {expected}")
        if value.dtype != spec.dtype.torch_dtype:
            raise OutputMismatch("dtype", f"output {name!r} has dtype {value.dtype}, "
                                          f"expected {spec.dtype.torch_dtype}")
