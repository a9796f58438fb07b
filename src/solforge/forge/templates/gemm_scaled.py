"""Quantised GEMM, FP8 (e4m3) or int8 operands with dequantisation scales, bfloat16 out.

Applies to a problem with operands x [M, K] and weight [N, K] of one 8-bit dtype (float8_e4m3fn
or int8), two float32 scales (x's first, then weight's, in definition order) and one bfloat16
output [M, N]. The scales' shapes say the granularity: per tensor (0-D), per row ([M] and [N]),
or per block ([M, K / g] and [N / h, K / g]: DeepSeek-V3's 1x128 and 128x128 blocks, g and h
read off the probe's axes). The probe then checks the reference is the dequantise-then-matmul
it claims to be.

Knobs: BLOCK_M/N/K, GROUP_M, NUM_STAGES, NUM_WARPS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import triton

from solforge.data.definition import Definition, TensorSpec
from solforge.data.workload import Workload, resolve_axes
from solforge.forge.templates.template import (
    Matcher,
    Params,
    Template,
    largest,
    render_kernel,
    usable_names,
)
from solforge.hardware.block_limits import (
    first_reason,
    matmul_words,
    register_reason,
    shared_memory_reason,
    threads_reason,
)
from solforge.problem.probe import Inputs, Model, matching_variant, small_axes
from solforge.problem.problem import Problem

OPERAND_DTYPES = ("float8_e4m3fn", "int8")
PROBE_SIZE = 256  # var M, N, K in the probe: whole 128-wide blocks


@dataclass(frozen=True)
class ScaledGemmBinding:
    x: str
    weight: str
    x_scale: str
    weight_scale: str
    out: str
    m_axis: str
    n_axis: str
    k_axis: str
    scaling: str  # "tensor", "row" or "block"
    group_k: int  # block scaling: K elements per scale
    group_n: int  # block scaling: weight rows per scale


def _dequantised(values: torch.Tensor, scale: torch.Tensor, scaling: str, group_rows: int,
                 group_k: int) -> torch.Tensor:
    """values (float32) times their scale, broadcast to the granularity."""
    values = values.to(torch.float32)
    if scaling == "tensor":
        return values * scale
    if scaling == "row":
        return values * scale[:, None]
    expanded = scale.repeat_interleave(group_rows, dim=0).repeat_interleave(group_k, dim=1)
    return values * expanded


def _model(roles: ScaledGemmBinding) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        x = _dequantised(inputs[roles.x], inputs[roles.x_scale], roles.scaling, 1,
                         roles.group_k)
        weight = _dequantised(inputs[roles.weight], inputs[roles.weight_scale], roles.scaling,
                              roles.group_n, roles.group_k)
        return [(x @ weight.T).to(torch.bfloat16)]

    return model


def _match(definition: Definition) -> ScaledGemmBinding | None:
    roles = _roles(definition)
    if roles is None:
        return None
    sizes = {axis: PROBE_SIZE for axis in (roles.m_axis, roles.n_axis, roles.k_axis)}
    axes = small_axes(definition, sizes)
    if roles.scaling == "block":
        roles = _with_groups(roles, definition, axes)
        if roles is None:
            return None
    found = matching_variant(definition, axes, {}, {roles.scaling: _model(roles)})
    return None if found is None else roles


def _roles(definition: Definition) -> ScaledGemmBinding | None:
    if len(definition.inputs) != 4 or len(definition.outputs) != 1:
        return None
    if not usable_names(definition) or any(s.is_scalar for s in definition.inputs.values()):
        return None
    operands = [s for s in definition.inputs.values() if s.dtype.name in OPERAND_DTYPES]
    scales = [s for s in definition.inputs.values() if s.dtype.name == "float32"]
    (out,) = definition.outputs.values()
    if len(operands) != 2 or len(scales) != 2 or out.dtype.name != "bfloat16":
        return None
    x, weight = operands
    if x.dtype != weight.dtype or len(x.shape) != 2 or len(weight.shape) != 2:
        return None
    if x.shape[1] != weight.shape[1] or out.shape != (x.shape[0], weight.shape[0]):
        return None
    scaling = _scaling(x, weight, *scales)
    if scaling is None or (scaling == "block" and x.dtype.name == "int8"):
        return None
    return ScaledGemmBinding(x.name, weight.name, scales[0].name, scales[1].name, out.name,
                             x.shape[0], weight.shape[0], x.shape[1], scaling, 1, 1)


def _scaling(x: TensorSpec, weight: TensorSpec, x_scale: TensorSpec,
             weight_scale: TensorSpec) -> str | None:
    if x_scale.shape == () and weight_scale.shape == ():
        return "tensor"
    if x_scale.shape == x.shape[:1] and weight_scale.shape == weight.shape[:1]:
        return "row"
    blocked = len(x_scale.shape) == 2 and len(weight_scale.shape) == 2
    if blocked and x_scale.shape[0] == x.shape[0] and x_scale.shape[1] == weight_scale.shape[1]:
        return "block"
    return None


def _with_groups(roles: ScaledGemmBinding, definition: Definition,
                 var_axes: dict[str, int]) -> ScaledGemmBinding | None:
    """Block sizes read off the probe's axes: K / (K groups) and N / (N blocks)."""
    axes = resolve_axes(definition, var_axes)
    k_groups = axes[definition.inputs[roles.x_scale].shape[1]]
    n_blocks = axes[definition.inputs[roles.weight_scale].shape[0]]
    k, n = axes[roles.k_axis], axes[roles.n_axis]
    if not k_groups or not n_blocks or k % k_groups or n % n_blocks:
        return None
    return replace(roles, group_k=k // k_groups, group_n=n // n_blocks)


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    k = problem.axes(workload)[binding.k_axis]
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    warps, stages = params["NUM_WARPS"], params["NUM_STAGES"]
    largest_m, largest_n = largest(problem, binding.m_axis), largest(problem, binding.n_axis)
    shared = stages * (bm + bn) * bk  # one byte per operand element
    accumulators = 2 if binding.scaling == "block" else 1  # block: each slice's own product
    return first_reason(
        threads_reason(warps),
        None if k % bk == 0 else f"K={k} is not a multiple of BLOCK_K={bk}",
        None if binding.scaling != "block" or binding.group_k % bk == 0 else
        f"BLOCK_K={bk} slices would straddle the {binding.group_k}-wide scale groups",
        None if bm <= max(16, triton.next_power_of_2(largest_m)) else
        f"BLOCK_M={bm} is taller than the largest M ({largest_m}) needs",
        None if bn <= max(64, triton.next_power_of_2(largest_n)) else
        f"BLOCK_N={bn} is wider than the largest N ({largest_n}) needs",
        shared_memory_reason(shared, f"{stages} stages of {bm}x{bk} and {bn}x{bk} tiles"),
        register_reason(matmul_words(bm, bn, bk, 1, warps, accumulators), warps,
                        f"{accumulators} {bm}x{bn} accumulator(s) and the {bm}x{bk} operand"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    constants = {"SCALING": binding.scaling, "GROUP_K": binding.group_k,
                 "GROUP_N": binding.group_n}
    arguments = {"x": binding.x, "weight": binding.weight, "x_scale": binding.x_scale,
                 "weight_scale": binding.weight_scale, "out": binding.out}
    operand = problem.definition.inputs[binding.x].dtype.name
    summary = (f"{operand} GEMM on the tensor cores with {binding.scaling}-wise dequantisation "
               "scales applied to the float32 (int32) products; bfloat16 out.")
    return render_kernel(problem.definition, TEMPLATE.name, params, "gemm_scaled.py",
                         constants, "gemm_scaled", arguments, summary)


TEMPLATE = Template(
    name="gemm_scaled",
    family="fp8_gemm",
    space={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (64, 128, 256), "BLOCK_K": (64, 128),
           "GROUP_M": (1, 8), "NUM_STAGES": (2, 3, 4), "NUM_WARPS": (4, 8)},
    applies=bind.applies,
    valid=valid,
    render=render,
)
