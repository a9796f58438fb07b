"""The names of the compute units a peak rate belongs to: one vocabulary for analyzer and harness.

A GPU has no single FLOP/s figure. The same multiply-add runs at very different rates on the
tensor cores (by input dtype) and on the plain CUDA cores ("SIMT"), so every peak in a hardware
profile, and every FLOP count the analyzer produces, is keyed by one of these names.
`tensor.int8` counts integer operations per second; the others count floating-point ones.
"""

from __future__ import annotations

TENSOR_FP64 = "tensor.fp64"
TENSOR_TF32 = "tensor.tf32"
TENSOR_BF16 = "tensor.bf16"
TENSOR_FP16 = "tensor.fp16"
TENSOR_FP8 = "tensor.fp8"
TENSOR_INT8 = "tensor.int8"
TENSOR_FP4 = "tensor.fp4"
SIMT_FP32 = "simt.fp32"
SIMT_FP64 = "simt.fp64"

UNITS: tuple[str, ...] = (
    TENSOR_FP64,
    TENSOR_TF32,
    TENSOR_BF16,
    TENSOR_FP16,
    TENSOR_FP8,
    TENSOR_INT8,
    TENSOR_FP4,
    SIMT_FP32,
    SIMT_FP64,
)


def rate_label(unit: str) -> str:
    """"OP/s" for the integer unit, "FLOP/s" for the rest."""
    return "OP/s" if unit == TENSOR_INT8 else "FLOP/s"
