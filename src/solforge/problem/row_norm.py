"""Recognise a row normalisation: RMSNorm or LayerNorm over the last axis, with or without a
fused residual add, and how it applies its weight.

The forge's row-norm template and the FlashInfer RMSNorm baseline both need the same answer.
The structure: one or two [rows, hidden] inputs (x, and the residual to add to it), a [hidden]
weight, optionally a [hidden] bias and a Python-scalar eps; outputs the normalised [rows,
hidden] tensor (and the residual sum, when there is a residual), all of one floating dtype. A
run of the reference (probe.py) then names the norm and the weight's form: Llama's product
with the normalised row rounded to the dtype first (scale_rounded), a float32 product (scale),
Gemma's 1 + weight (offset); LayerNorm's float32 affine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from solforge.data.definition import Definition, TensorSpec
from solforge.problem.probe import FLOAT_DTYPES, Inputs, Model, matching_variant, small_axes

RMS_WEIGHTS = ("scale_rounded", "scale", "offset")
PROBE_EPS = 1e-5


@dataclass(frozen=True)
class RowNormRoles:
    x: str
    weight: str
    eps: str
    out: str
    residual: str | None
    residual_out: str | None
    bias: str | None
    hidden_axis: str
    norm: str  # "rms" or "layer"
    weight_mode: str  # one of RMS_WEIGHTS


def _normalise(x: torch.Tensor, norm: str, eps: float) -> torch.Tensor:
    if norm == "rms":
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)


def _model(roles: RowNormRoles, dtype: torch.dtype) -> Model:
    """The kernel's arithmetic in PyTorch, outputs in definition order."""
    def model(inputs: Inputs) -> list[torch.Tensor]:
        x = inputs[roles.x].to(torch.float32)
        extra = []
        if roles.residual is not None:
            rounded_sum = (x + inputs[roles.residual].to(torch.float32)).to(dtype)
            extra = [rounded_sum]
            x = rounded_sum.to(torch.float32)
        y = _normalise(x, roles.norm, inputs[roles.eps])
        weight = inputs[roles.weight].to(torch.float32)
        if roles.weight_mode == "scale_rounded":
            y = y.to(dtype).to(torch.float32) * weight
        elif roles.weight_mode == "offset":
            y = y * (1.0 + weight)
        else:
            y = y * weight
        if roles.bias is not None:
            y = y + inputs[roles.bias].to(torch.float32)
        return [y.to(dtype), *extra]

    return model


def recognise_row_norm(definition: Definition) -> RowNormRoles | None:
    """The roles, the norm and the weight's form the reference computes, or None. Runs the
    reference once on the CPU (a reference that cannot: None)."""
    roles = row_norm_roles(definition)
    if roles is None:
        return None
    dtype = definition.inputs[roles.x].dtype.torch_dtype
    if roles.bias is not None:
        forms = [("layer", "scale")]
    else:
        forms = [("rms", mode) for mode in RMS_WEIGHTS] + [("layer", "scale")]
    variants = {(norm, mode): _model(replace(roles, norm=norm, weight_mode=mode), dtype)
                for norm, mode in forms}
    found = matching_variant(definition, small_axes(definition), {roles.eps: PROBE_EPS},
                             variants)
    return None if found is None else replace(roles, norm=found[0], weight_mode=found[1])


def row_norm_roles(definition: Definition) -> RowNormRoles | None:
    """Inputs and outputs by shape: [rows, hidden] activations, [hidden] weight and bias."""
    tensors = [*definition.inputs.values(), *definition.outputs.values()]
    scalars = [spec for spec in definition.inputs.values() if spec.is_scalar]
    if len(scalars) != 1 or scalars[0].dtype.kind != "float":
        return None
    shaped = [spec for spec in tensors if not spec.is_scalar]
    if len({spec.dtype.name for spec in shaped}) != 1 or shaped[0].dtype.name not in FLOAT_DTYPES:
        return None
    rows = [spec for spec in definition.inputs.values() if _is_rows(spec)]
    vectors = [spec for spec in definition.inputs.values()
               if spec.shape is not None and len(spec.shape) == 1]
    outputs = list(definition.outputs.values())
    if not rows or len(rows) > 2 or not vectors or len(vectors) > 2:
        return None
    if len(rows) + len(vectors) + 1 != len(definition.inputs) or len(outputs) != len(rows):
        return None
    layout = rows[0].shape
    if any(spec.shape != layout for spec in [*rows, *outputs]):
        return None
    if any(spec.shape != layout[1:] for spec in vectors):
        return None
    residual = rows[1].name if len(rows) == 2 else None
    residual_out = outputs[1].name if len(outputs) == 2 else None
    bias = vectors[1].name if len(vectors) == 2 else None
    return RowNormRoles(rows[0].name, vectors[0].name, scalars[0].name, outputs[0].name,
                          residual, residual_out, bias, layout[1], "rms", "scale")


def _is_rows(spec: TensorSpec) -> bool:
    return spec.shape is not None and len(spec.shape) == 2


