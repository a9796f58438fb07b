"""Row normalisation: RMSNorm and LayerNorm, each with or without a fused residual add.

Applies to a problem whose inputs are one or two [rows, hidden] tensors (x, and the residual to
add to it), a [hidden] weight, optionally a [hidden] bias and a Python-scalar eps, and whose
outputs are the normalised [rows, hidden] tensor (and the residual sum, when there is a
residual), all of one floating dtype; the probe then names the norm and how the weight is
applied (Llama's bf16 product, LayerNorm's float32 affine, Gemma's 1 + weight).

Knobs: ROWS per program, BLOCK (columns held at once), NUM_WARPS and METHOD: single_pass (the
row in registers, BLOCK >= hidden) or two_pass (the row streamed twice in BLOCK pieces, for rows
too wide for registers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from solforge.data.definition import Definition, TensorSpec
from solforge.data.workload import Workload
from solforge.forge.templates.template import (
    FLOAT_DTYPES,
    Matcher,
    Params,
    Template,
    largest,
    render_kernel,
    row_block_reason,
    usable_names,
)
from solforge.hardware.block_limits import (
    first_reason,
    idle_threads_reason,
    register_reason,
    threads_reason,
    tile_words,
)
from solforge.problem.probe import Inputs, Model, matching_variant, small_axes
from solforge.problem.problem import Problem

RMS_WEIGHTS = ("scale_rounded", "scale", "offset")
NORM_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm"}
PROBE_EPS = 1e-5


@dataclass(frozen=True)
class RowNormBinding:
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


def _model(roles: RowNormBinding, dtype: torch.dtype) -> Model:
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


def _match(definition: Definition) -> RowNormBinding | None:
    roles = _roles(definition)
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


def _roles(definition: Definition) -> RowNormBinding | None:
    """Inputs and outputs by shape: [rows, hidden] activations, [hidden] weight and bias."""
    if not usable_names(definition):
        return None
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
    return RowNormBinding(rows[0].name, vectors[0].name, scalars[0].name, outputs[0].name,
                          residual, residual_out, bias, layout[1], "rms", "scale")


def _is_rows(spec: TensorSpec) -> bool:
    return spec.shape is not None and len(spec.shape) == 2


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    hidden = problem.axes(workload)[binding.hidden_axis]
    widest = largest(problem, binding.hidden_axis)
    rows, block, warps = params["ROWS"], params["BLOCK"], params["NUM_WARPS"]
    single = params["METHOD"] == "single_pass"
    return first_reason(
        threads_reason(warps),
        idle_threads_reason(rows * block, warps, "ROWS * BLOCK"),
        row_block_reason(block, hidden, widest, single),
        register_reason(2 * tile_words(rows, block, warps), warps,
                        "the rows' values and their normalised form"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    constants = {"NORM": binding.norm, "WEIGHT": binding.weight_mode,
                 "HAS_RESIDUAL": binding.residual is not None,
                 "HAS_BIAS": binding.bias is not None}
    arguments = {"x": binding.x, "weight": binding.weight, "eps": binding.eps,
                 "out": binding.out}
    if binding.residual is not None:
        arguments.update(residual=binding.residual, residual_out=binding.residual_out)
    if binding.bias is not None:
        arguments["bias"] = binding.bias
    added = "Residual add + " if binding.residual is not None else ""
    summary = (f"{added}{NORM_NAMES[binding.norm]} over rows (weight: {binding.weight_mode}), "
               "float32 statistics.")
    return render_kernel(problem.definition, TEMPLATE.name, params, "row_norm.py", constants,
                         "row_norm", arguments, summary)


TEMPLATE = Template(
    name="row_norm",
    family="row_reduction",
    space={"ROWS": (1, 2, 4, 8), "BLOCK": (256, 512, 1024, 2048, 4096, 8192),
           "NUM_WARPS": (1, 2, 4, 8, 16), "METHOD": ("single_pass", "two_pass")},
    applies=bind.applies,
    valid=valid,
    render=render,
)
