"""The dtype names of the FlashInfer-Trace / SOL-ExecBench formats and what they mean in memory.

Shapes in a definition are *logical*: they count elements. The packed 4-bit formats
(`float4_e2m1`, `float4_e2m1fn_x2`) store two elements per byte, so the tensor handed to a kernel
has its last dimension halved (the SOL-ExecBench convention). Byte counts in the analysis use the
logical bits per element, so a packed fp4 element costs half a byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DType:
    name: str
    torch_dtype: torch.dtype
    bits: int  # logical bits per element
    kind: str  # "float", "int", "bool"
    elements_per_storage: int = 1  # 2 for packed fp4

    @property
    def is_float(self) -> bool:
        return self.kind == "float"


_DTYPES = [
    DType("float64", torch.float64, 64, "float"),
    DType("float32", torch.float32, 32, "float"),
    DType("float16", torch.float16, 16, "float"),
    DType("bfloat16", torch.bfloat16, 16, "float"),
    DType("float8_e4m3fn", torch.float8_e4m3fn, 8, "float"),
    DType("float8_e5m2", torch.float8_e5m2, 8, "float"),
    DType("float8_e8m0fnu", torch.float8_e8m0fnu, 8, "float"),
    DType("float4_e2m1", torch.float4_e2m1fn_x2, 4, "float", elements_per_storage=2),
    DType("float4_e2m1fn_x2", torch.float4_e2m1fn_x2, 4, "float", elements_per_storage=2),
    DType("int64", torch.int64, 64, "int"),
    DType("int32", torch.int32, 32, "int"),
    DType("int16", torch.int16, 16, "int"),
    DType("int8", torch.int8, 8, "int"),
    DType("uint8", torch.uint8, 8, "int"),
    DType("bool", torch.bool, 8, "bool"),
]
DTYPES: dict[str, DType] = {d.name: d for d in _DTYPES}

_BY_TORCH: dict[torch.dtype, DType] = {}
for _d in _DTYPES:
    _BY_TORCH.setdefault(_d.torch_dtype, _d)


def dtype_named(name: str) -> DType:
    """The DType for a format name; KeyError lists the known names."""
    if name not in DTYPES:
        raise KeyError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})")
    return DTYPES[name]


def dtype_of(torch_dtype: torch.dtype) -> DType:
    return _BY_TORCH[torch_dtype]


def packing(torch_dtype: torch.dtype) -> int:
    """Logical elements per storage element: 2 for packed fp4, else 1."""
    if torch_dtype in _BY_TORCH:
        return _BY_TORCH[torch_dtype].elements_per_storage
    return 1


def storage_shape(logical_shape: tuple[int, ...], dtype: DType) -> tuple[int, ...]:
    """Shape of the tensor that holds `logical_shape` elements of `dtype`."""
    if dtype.elements_per_storage == 1 or not logical_shape:
        return logical_shape
    last = logical_shape[-1]
    if last % dtype.elements_per_storage:
        raise ValueError(f"{dtype.name} packs {dtype.elements_per_storage} elements per byte: "
                         f"the last dimension ({last}) must be even")
    return (*logical_shape[:-1], last // dtype.elements_per_storage)


def logical_shape(storage: tuple[int, ...], dtype: DType) -> tuple[int, ...]:
    if dtype.elements_per_storage == 1 or not storage:
        return storage
    return (*storage[:-1], storage[-1] * dtype.elements_per_storage)
