"""What the tracer records and what costing produces: plain frozen records, no torch state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class TensorInfo:
    """A tensor seen by an op: its shape, dtype and where its values came from.

    `origin` is the narrowest dtype the values were upcast from through value-preserving steps
    (casts up, scaling by a broadcast factor, views), so a matmul on fp8 data dequantized to
    float32 is priced as the fp8 product a kernel would run. `source` names the graph input whose
    storage this tensor aliases, if any. `ident` identifies the tensor within one trace.
    """

    ident: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    origin: torch.dtype
    source: str | None = None
    values: Any = None  # a small CPU tensor of the concrete values, when the tracer knows them

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Product:
    """`multiplicity` independent C[M,N] += A[M,K] B[K,N] products of `element_bytes` operands."""

    m: int
    n: int
    k: int
    element_bytes: int
    multiplicity: float = 1.0


@dataclass(frozen=True)
class OpRecord:
    """One operator call: `name` like "aten.mm.default", or "solforge.sdpa" for attention."""

    name: str
    arguments: dict[str, Any]  # by schema name, defaults filled in; tensors as TensorInfo
    outputs: tuple[TensorInfo, ...]
    is_view: bool = False
    tags: frozenset[str] = frozenset()  # ATen tags: "pointwise", "reduction", ...

    @property
    def packet(self) -> str:
        """"aten.mm.default" -> "mm": the key costs are registered under."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    def arg(self, name: str, default: Any = None) -> Any:
        return self.arguments.get(name, default)

    def tensor_args(self) -> list[TensorInfo]:
        found: list[TensorInfo] = []
        for value in self.arguments.values():
            if isinstance(value, TensorInfo):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                found.extend(v for v in value if isinstance(v, TensorInfo))
        return found


@dataclass(frozen=True)
class OpCost:
    """FLOPs per compute unit and the bytes one unfused kernel for this op would move."""

    flops: dict[str, float] = field(default_factory=dict)
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    products: tuple[Product, ...] = ()  # for the capacity-aware traffic bound

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written
