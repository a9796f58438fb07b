"""Grouped GEMM of a mixture of experts: rows sorted by expert, offsets per expert, FP8 blocks.

Applies to a problem with inputs x [rows, K] (float8_e4m3fn), its float32 scales [rows, K / g],
weight [experts, N, K] (float8_e4m3fn), its float32 scales [experts, N / h, K / g] and int32
expert_offsets [experts + 1], in that order, and one bfloat16 output [rows, N]; g and h are read
off the probe's axes, and the probe checks the reference is the per-expert
dequantise-then-matmul (rows of expert e: offsets[e] to offsets[e + 1] - 1).

Knobs: BLOCK_M (rows per tile: small for many sparsely used experts), BLOCK_N, BLOCK_K (a
divisor of the scale group), NUM_STAGES, NUM_WARPS.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton

from solforge.data.definition import Definition
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

FP8 = "float8_e4m3fn"
PROBE_SIZES = {"rows": 24, "experts": 3, "N": 256, "K": 256}


@dataclass(frozen=True)
class MoeBinding:
    x: str
    x_scale: str
    weight: str
    weight_scale: str
    offsets: str
    out: str
    rows_axis: str
    n_axis: str
    k_axis: str
    group_k: int
    group_n: int


def _model(roles: MoeBinding) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        x_scale = inputs[roles.x_scale].repeat_interleave(roles.group_k, dim=1)
        x = inputs[roles.x].to(torch.float32) * x_scale
        weight = inputs[roles.weight].to(torch.float32)
        scale = inputs[roles.weight_scale].repeat_interleave(roles.group_n, dim=1)
        weight = weight * scale.repeat_interleave(roles.group_k, dim=2)
        offsets = inputs[roles.offsets].tolist()
        out = torch.zeros(x.shape[0], weight.shape[1], dtype=torch.bfloat16)
        for expert, (start, end) in enumerate(itertools.pairwise(offsets)):
            out[start:end] = (x[start:end] @ weight[expert].T).to(torch.bfloat16)
        return [out]

    return model


def _match(definition: Definition) -> MoeBinding | None:
    roles = _roles(definition)
    if roles is None:
        return None
    experts_axis = definition.inputs[roles.weight].shape[0]
    sizes = {roles.rows_axis: PROBE_SIZES["rows"], experts_axis: PROBE_SIZES["experts"],
             roles.n_axis: PROBE_SIZES["N"], roles.k_axis: PROBE_SIZES["K"]}
    axes = small_axes(definition, sizes)
    resolved = resolve_axes(definition, axes)
    k_groups = resolved[definition.inputs[roles.x_scale].shape[1]]
    n_blocks = resolved[definition.inputs[roles.weight_scale].shape[1]]
    k, n = resolved[roles.k_axis], resolved[roles.n_axis]
    if not k_groups or not n_blocks or k % k_groups or n % n_blocks:
        return None
    roles = replace(roles, group_k=k // k_groups, group_n=n // n_blocks)
    found = matching_variant(definition, axes, {}, {"block": _model(roles)})
    return None if found is None else roles


def _roles(definition: Definition) -> MoeBinding | None:
    if len(definition.inputs) != 5 or len(definition.outputs) != 1:
        return None
    if not usable_names(definition) or any(s.is_scalar for s in definition.inputs.values()):
        return None
    x, x_scale, weight, weight_scale, offsets = definition.inputs.values()
    (out,) = definition.outputs.values()
    if x.dtype.name != FP8 or weight.dtype.name != FP8 or out.dtype.name != "bfloat16":
        return None
    if x_scale.dtype.name != "float32" or weight_scale.dtype.name != "float32":
        return None
    if offsets.dtype.name != "int32" or len(offsets.shape) != 1:
        return None
    if len(x.shape) != 2 or len(weight.shape) != 3 or weight.shape[2] != x.shape[1]:
        return None
    if out.shape != (x.shape[0], weight.shape[1]) or len(x_scale.shape) != 2:
        return None
    if len(weight_scale.shape) != 3 or x_scale.shape[0] != x.shape[0]:
        return None
    if weight_scale.shape[0] != weight.shape[0] or weight_scale.shape[2] != x_scale.shape[1]:
        return None
    return MoeBinding(x.name, x_scale.name, weight.name, weight_scale.name, offsets.name,
                      out.name, x.shape[0], weight.shape[1], x.shape[1], 1, 1)


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    k = problem.axes(workload)[binding.k_axis]
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    warps, stages = params["NUM_WARPS"], params["NUM_STAGES"]
    largest_n = largest(problem, binding.n_axis)
    shared = stages * (bm + bn) * bk  # one byte per FP8 element
    return first_reason(
        threads_reason(warps),
        None if k % bk == 0 else f"K={k} is not a multiple of BLOCK_K={bk}",
        None if binding.group_k % bk == 0 else
        f"BLOCK_K={bk} slices would straddle the {binding.group_k}-wide scale groups",
        None if bn <= max(64, triton.next_power_of_2(largest_n)) else
        f"BLOCK_N={bn} is wider than the largest N ({largest_n}) needs",
        shared_memory_reason(shared, f"{stages} stages of {bm}x{bk} and {bn}x{bk} tiles"),
        register_reason(matmul_words(bm, bn, bk, 1, warps, accumulators=2), warps,
                        f"the {bm}x{bn} accumulator, each slice's product and the operand"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    arguments = {"x": binding.x, "x_scale": binding.x_scale, "weight": binding.weight,
                 "weight_scale": binding.weight_scale, "expert_offsets": binding.offsets,
                 "out": binding.out}
    summary = ("Grouped FP8 GEMM over experts (rows sorted by expert, tiles found from the "
               "offsets on the device), block scales applied per K group; bfloat16 out.")
    return render_kernel(problem.definition, TEMPLATE.name, params, "moe_gemm.py",
                         {"GROUP_K": binding.group_k, "GROUP_N": binding.group_n},
                         "moe_gemm", arguments, summary)


TEMPLATE = Template(
    name="moe_grouped_gemm",
    family="moe",
    space={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (64, 128, 256), "BLOCK_K": (64, 128),
           "NUM_STAGES": (2, 3, 4), "NUM_WARPS": (4, 8)},
    applies=bind.applies,
    valid=valid,
    render=render,
)
