"""GEMM with a fused epilogue, out = act(x @ weight^T + bias): tiled, persistent, TMA and split-K
kernels.

Applies to a problem with inputs x [M, K] and weight [N, K] (nn.Linear's layout), optionally a
bias [N], and one output [M, N], all of one 16-bit floating dtype; the probe names the epilogue
the reference applies (none, bias, and an activation: silu, gelu erf or tanh, with the
pre-activation rounded to the output dtype first or not). The epilogue is the problem's, not a
knob: a kernel that computed another would be wrong.

Knobs: BLOCK_M/N/K, GROUP_M (grouped tile order), NUM_STAGES (software pipelining depth) and
NUM_WARPS, for four templates: gemm (one tile per program), gemm_split_k (K cut into SPLIT_K
slices computed by separate programs, for outputs with fewer tiles than SMs; no GROUP_M knob),
gemm_persistent (one program per SM looping over tiles) and gemm_tma (tiles moved by Hopper's
tensor memory accelerator through host tensor descriptors).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
import triton

from solforge.data.definition import Definition
from solforge.data.workload import Workload
from solforge.forge.templates.template import (
    Matcher,
    Params,
    Template,
    largest,
    render_kernel,
    usable_names,
)
from solforge.hardware.block_limits import (
    TARGET,
    first_reason,
    matmul_words,
    register_reason,
    shared_memory_reason,
    threads_reason,
)
from solforge.problem.probe import Inputs, Model, matching_variant, small_axes
from solforge.problem.problem import Problem

DTYPES = ("float16", "bfloat16")
ACTIVATIONS = ("none", "silu", "gelu_erf", "gelu_tanh")
TMA_ALIGNMENT = 16  # bytes: a TMA descriptor's row strides must be multiples of this
SPACE = {"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_N": (32, 64, 128, 256),
         "BLOCK_K": (32, 64, 128), "GROUP_M": (1, 8), "NUM_STAGES": (2, 3, 4, 5),
         "NUM_WARPS": (4, 8)}
# Split-K is for outputs of few tiles (decode batches), so no 256-row tiles; GROUP_M is a
# constant of its kernel (grouping matters only once the tiles fill the GPU and K is not split).
SPLIT_K_SPACE = {"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (32, 64, 128, 256),
                 "BLOCK_K": (32, 64, 128), "SPLIT_K": (2, 4, 8, 16, 32, 64),
                 "NUM_STAGES": (2, 3, 4, 5), "NUM_WARPS": (4, 8)}



def _setting(m: int, n: int, k: int, group_m: int, stages: int, warps: int) -> dict[str, int]:
    return {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": group_m, "NUM_STAGES": stages,
            "NUM_WARPS": warps}


# Tried first by the search (where valid), before its sampler's random start:
# - 128x256x64, 8 warps, 3 stages: the large-M tile of Hopper's Triton GEMMs. Operands are
#   (128 + 256) * 64 * 2 B = 48 KiB a stage, 144 KiB for three of the H200's 227 KiB; the
#   128x256 fp32 accumulator is 128 registers a thread over 256 threads. Each operand byte
#   loaded feeds 2 * 128 * 256 / (2 * (128 + 256)) = 85 FLOP, the most of these tiles (below
#   DRAM's ridge of 989 TFLOP/s / 4.8 TB/s = 206: the grouped order makes most loads L2 hits).
# - 128x128x64, 8 warps, 4 stages: a square tile, 32 KiB a stage, for N or M not filling the
#   256-wide one;
# - 64x256x64, 4 warps, 5 stages: the best setting of every tiled Llama GEMM in the first H200
#   goal run (benchmarks/results/h200-forge.jsonl), where no setting above was ever drawn; with
#   TMA (whose five stages do not fit) 4 stages, as its best there had.
SEEDS = (_setting(128, 256, 64, 8, 3, 8), _setting(128, 128, 64, 8, 4, 8),
         _setting(64, 256, 64, 8, 5, 4))
TMA_SEEDS = (*SEEDS[:2], _setting(64, 256, 64, 8, 4, 4))
# Split-K is for the decode shapes (a few rows, a long K): enough programs to fill 132 SMs
# from an N of 4096 (64 column tiles x 4 slices, or 32 x 8), each slice's K still 8+ steps long.
SPLIT_K_SEEDS = ({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 4, "NUM_STAGES": 4,
                  "NUM_WARPS": 4},
                 {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 8, "NUM_STAGES": 4,
                  "NUM_WARPS": 4})


@dataclass(frozen=True)
class GemmBinding:
    x: str
    weight: str
    bias: str | None
    out: str
    m_axis: str
    n_axis: str
    k_axis: str
    element_bytes: int
    activation: str
    round_before_activation: bool


def _activate(y: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return F.silu(y)
    if activation == "gelu_erf":
        return F.gelu(y)
    return F.gelu(y, approximate="tanh")


class _ProductOnce:
    """x @ weight^T (+ bias) in float32, computed at the first call and then reused.

    Every epilogue variant of one probe starts from the same product, and the product is the
    costly part (a 28672 x 4096 weight is half a gigabyte in float32).
    """

    def __init__(self, roles: GemmBinding) -> None:
        self.roles = roles
        self.value: torch.Tensor | None = None

    def __call__(self, inputs: Inputs) -> torch.Tensor:
        if self.value is None:
            x, weight = inputs[self.roles.x], inputs[self.roles.weight]
            self.value = x.to(torch.float32) @ weight.to(torch.float32).T
            if self.roles.bias is not None:
                self.value += inputs[self.roles.bias].to(torch.float32)
        return self.value


def _model(product: _ProductOnce, dtype: torch.dtype, activation: str,
           round_first: bool) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        y = product(inputs)
        if activation != "none":
            if round_first:
                y = y.to(dtype).to(torch.float32)
            y = _activate(y, activation)
        return [y.to(dtype)]

    return model


def _match(definition: Definition) -> GemmBinding | None:
    roles = _roles(definition)
    if roles is None:
        return None
    forms = [("none", False)] + [(act, rounded) for act in ACTIVATIONS[1:]
                                 for rounded in (False, True)]
    product = _ProductOnce(roles)
    dtype = definition.inputs[roles.x].dtype.torch_dtype
    variants = {form: _model(product, dtype, *form) for form in forms}
    found = matching_variant(definition, small_axes(definition), {}, variants)
    if found is None:
        return None
    return replace(roles, activation=found[0], round_before_activation=found[1])


def _roles(definition: Definition) -> GemmBinding | None:
    if len(definition.inputs) not in (2, 3) or len(definition.outputs) != 1:
        return None
    if not usable_names(definition):
        return None
    x, weight, *rest = definition.inputs.values()
    (out,) = definition.outputs.values()
    bias = rest[0] if rest else None
    specs = [x, weight, out, *rest]
    if any(spec.shape is None for spec in specs):
        return None
    if len({spec.dtype.name for spec in specs}) != 1 or x.dtype.name not in DTYPES:
        return None
    if len(x.shape) != 2 or len(weight.shape) != 2 or x.shape[1] != weight.shape[1]:
        return None
    if out.shape != (x.shape[0], weight.shape[0]):
        return None
    if bias is not None and bias.shape != weight.shape[:1]:
        return None
    return GemmBinding(x.name, weight.name, bias.name if bias else None, out.name, x.shape[0],
                       weight.shape[0], x.shape[1], x.dtype.bits // 8, "none", False)


bind = Matcher(_match)


def _tile_reasons(params: Params, problem: Problem, workload: Workload,
                  binding: GemmBinding, staged_output: bool) -> str | None:
    """The checks every GEMM kernel shares: warps, tile sizes, shared memory, registers."""
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    warps, stages = params["NUM_WARPS"], params["NUM_STAGES"]
    # Operand tiles in flight, plus the output tile when the store is staged in shared memory.
    shared = stages * (bm + bn) * bk * binding.element_bytes
    shared += bm * bn * binding.element_bytes if staged_output else 0
    largest_m = largest(problem, binding.m_axis)
    largest_n = largest(problem, binding.n_axis)
    return first_reason(
        threads_reason(warps),
        None if bm <= max(16, triton.next_power_of_2(largest_m)) else
        f"BLOCK_M={bm} is taller than the largest M ({largest_m}) needs",
        None if bn <= max(32, triton.next_power_of_2(largest_n)) else
        f"BLOCK_N={bn} is wider than the largest N ({largest_n}) needs",
        shared_memory_reason(shared, f"{stages} stages of {bm}x{bk} and {bn}x{bk} tiles"),
        register_reason(matmul_words(bm, bn, bk, binding.element_bytes, warps), warps,
                        f"the {bm}x{bn} float32 accumulator and the {bm}x{bk} operand"),
    )


def valid_tiled(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding("gemm", problem)
    k = problem.axes(workload)[binding.k_axis]
    return first_reason(
        None if k % params["BLOCK_K"] == 0 else
        f"K={k} is not a multiple of BLOCK_K={params['BLOCK_K']} (the loop has no K mask)",
        _tile_reasons(params, problem, workload, binding, staged_output=False),
    )


def valid_tma(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding("gemm_tma", problem)
    axes = problem.axes(workload)
    k, n = axes[binding.k_axis], axes[binding.n_axis]
    aligned = [value for value in (k, n) if value * binding.element_bytes % TMA_ALIGNMENT == 0]
    return first_reason(
        None if len(aligned) == 2 else
        f"TMA needs 16-byte row strides: K={k} and N={n} of {binding.element_bytes}-byte elements",
        _tile_reasons(params, problem, workload, binding, staged_output=True),
    )


def valid_split_k(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding("gemm_split_k", problem)
    k = problem.axes(workload)[binding.k_axis]
    block_k, splits = params["BLOCK_K"], params["SPLIT_K"]
    return first_reason(
        None if k % block_k == 0 else
        f"K={k} is not a multiple of BLOCK_K={block_k} (the loop has no K mask)",
        None if k // block_k >= splits else
        f"SPLIT_K={splits} leaves a split without a BLOCK_K step (K={k} is {k // block_k} "
        f"steps of BLOCK_K={block_k})",
        _never_splits(params, problem, binding),
        _tile_reasons(params, problem, workload, binding, staged_output=False),
    )


def _never_splits(params: Params, problem: Problem, binding: GemmBinding) -> str | None:
    """The kernel splits K only for a workload with fewer output tiles than SMs (elsewhere the
    tiles already fill the GPU); if no workload has that few, the setting is the tiled gemm.

    Judged over all of the problem's workloads: a problem whose prefill workloads fill the GPU
    keeps split-K for its decode ones."""
    def tiles(workload: Workload) -> int:
        axes = problem.axes(workload)
        return (triton.cdiv(axes[binding.m_axis], params["BLOCK_M"]) *
                triton.cdiv(axes[binding.n_axis], params["BLOCK_N"]))

    fewest = min(tiles(workload) for workload in problem.workloads)
    if fewest < TARGET.sm_count:
        return None
    return (f"every workload has at least {fewest} tiles of {params['BLOCK_M']}x"
            f"{params['BLOCK_N']} for {TARGET.sm_count} SMs: K would never be split "
            "(the gemm template's kernel)")


def _render(params: Params, problem: Problem, template: str, file: str,
            schedule: dict[str, bool]) -> dict[str, Any]:
    binding = bind.binding(template, problem)
    constants = {**schedule, "HAS_BIAS": binding.bias is not None,
                 "ACTIVATION": binding.activation,
                 "ROUND_BEFORE_ACTIVATION": binding.round_before_activation}
    arguments = {"x": binding.x, "weight": binding.weight, "out": binding.out}
    if binding.bias is not None:
        arguments["bias"] = binding.bias
    bias = " + bias" if binding.bias else ""
    summary = (f"GEMM x @ weight^T{bias}, epilogue {binding.activation}, float32 accumulation, "
               "one rounding.")
    return render_kernel(problem.definition, template, params, file, constants, "gemm",
                         arguments, summary)


def render_tiled(params: Params, problem: Problem) -> dict[str, Any]:
    return _render(params, problem, "gemm", "gemm.py", {"PERSISTENT": False})


def render_persistent(params: Params, problem: Problem) -> dict[str, Any]:
    return _render(params, problem, "gemm_persistent", "gemm.py", {"PERSISTENT": True})


def render_split_k(params: Params, problem: Problem) -> dict[str, Any]:
    return _render(params, problem, "gemm_split_k", "gemm_split_k.py", {})


def render_tma(params: Params, problem: Problem) -> dict[str, Any]:
    return _render(params, problem, "gemm_tma", "gemm_tma.py", {})


TILED = Template(name="gemm", family="gemm", space=SPACE, applies=bind.applies, valid=valid_tiled,
                 render=render_tiled, seeds=SEEDS)
PERSISTENT = Template(name="gemm_persistent", family="gemm", space=SPACE, applies=bind.applies,
                      valid=valid_tiled, render=render_persistent, seeds=SEEDS)
TMA = Template(name="gemm_tma", family="gemm", space=SPACE, applies=bind.applies, valid=valid_tma,
               render=render_tma, seeds=TMA_SEEDS)
SPLIT_K = Template(name="gemm_split_k", family="gemm", space=SPLIT_K_SPACE, applies=bind.applies,
                   valid=valid_split_k, render=render_split_k, seeds=SPLIT_K_SEEDS)
# The optimize loop gives each template an equal share of the budget, in this order; a time
# limit cuts the last ones. Split-K comes second: it is the only kernel here that parallelises
# the decode workloads' long K, where the others are furthest from the speed of light.
TEMPLATES = (TILED, SPLIT_K, PERSISTENT, TMA)
