"""Attention forward: prefill (causal or bidirectional, GQA/MQA) and split-KV decode.

Prefill applies to a problem with q [batch, seq, q_heads, dim], k and v [batch, seq, kv_heads,
dim] and out shaped as q; decode to q [batch, q_heads, dim], caches [batch, kv_len, kv_heads,
dim] and out shaped as q. All of one 16-bit floating dtype, dim a power of two, q_heads a
multiple of kv_heads. The probe then checks the reference is softmax(q k^T / sqrt(dim)) v,
causal or not (prefill), no mask (decode): a model whose scores use another scale (Gemma-3's
1/sqrt(168)) is left alone, as are paged and ragged layouts.

Prefill knobs: BLOCK_M (queries per program), BLOCK_N (keys per step), NUM_STAGES, NUM_WARPS.
Decode knobs: BLOCK_H (query heads of one KV group per program), BLOCK_N, SPLIT_LEN (keys per
split of the cache), NUM_STAGES, NUM_WARPS.
"""

from __future__ import annotations

import math
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
    first_reason,
    matmul_words,
    register_reason,
    shared_memory_reason,
    threads_reason,
    tile_words,
)
from solforge.problem.probe import Inputs, Model, matching_variant, small_axes
from solforge.problem.problem import Problem

DTYPES = ("float16", "bfloat16")
PROBE_SEQUENCE = 16  # long enough that a causal mask changes the result


@dataclass(frozen=True)
class AttentionBinding:
    q: str
    k: str
    v: str
    out: str
    seq_axis: str  # prefill: the sequence; decode: the cache length
    q_heads_axis: str
    kv_heads_axis: str
    dim_axis: str
    element_bytes: int
    causal: bool


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(dim)) v in float32, on [batch, heads, seq, dim] tensors."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                          scale=1.0 / math.sqrt(q.shape[-1]))


def _prefill_model(roles: AttentionBinding, causal: bool) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        q, k, v = (inputs[name].transpose(1, 2) for name in (roles.q, roles.k, roles.v))
        return [_attention(q, k, v, causal).transpose(1, 2).to(q.dtype)]

    return model


def _decode_model(roles: AttentionBinding) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        q = inputs[roles.q].unsqueeze(2)
        k, v = (inputs[name].transpose(1, 2) for name in (roles.k, roles.v))
        return [_attention(q, k, v, causal=False).squeeze(2).to(q.dtype)]

    return model


def _roles(definition: Definition, q_rank: int) -> AttentionBinding | None:
    """q, k, v, out by position and shape; q_rank 4 for prefill, 3 for decode."""
    if len(definition.inputs) != 3 or len(definition.outputs) != 1:
        return None
    if not usable_names(definition) or any(s.is_scalar for s in definition.inputs.values()):
        return None
    q, k, v = definition.inputs.values()
    (out,) = definition.outputs.values()
    if len({spec.dtype.name for spec in (q, k, v, out)}) != 1 or q.dtype.name not in DTYPES:
        return None
    if len(q.shape) != q_rank or len(k.shape) != 4 or v.shape != k.shape or out.shape != q.shape:
        return None
    if k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        return None
    if q_rank == 4 and k.shape[1] != q.shape[1]:
        return None
    return AttentionBinding(q.name, k.name, v.name, out.name, k.shape[1], q.shape[-2],
                            k.shape[2], q.shape[-1], q.dtype.bits // 8, q_rank == 4)


def _match_prefill(definition: Definition) -> AttentionBinding | None:
    roles = _roles(definition, q_rank=4)
    if roles is None:
        return None
    variants = {causal: _prefill_model(roles, causal) for causal in (True, False)}
    axes = small_axes(definition, {roles.seq_axis: PROBE_SEQUENCE})
    found = matching_variant(definition, axes, {}, variants)
    return None if found is None else replace(roles, causal=found)


def _match_decode(definition: Definition) -> AttentionBinding | None:
    roles = _roles(definition, q_rank=3)
    if roles is None:
        return None
    axes = small_axes(definition, {roles.seq_axis: PROBE_SEQUENCE})
    found = matching_variant(definition, axes, {}, {"full": _decode_model(roles)})
    return None if found is None else roles


bind_prefill = Matcher(_match_prefill)
bind_decode = Matcher(_match_decode)


def _shape_reason(problem: Problem, workload: Workload, binding: AttentionBinding) -> str | None:
    axes = problem.axes(workload)
    dim, q_heads = axes[binding.dim_axis], axes[binding.q_heads_axis]
    kv_heads = axes[binding.kv_heads_axis]
    if dim & (dim - 1) or dim < 16:
        return f"head_dim={dim} is not a power of two >= 16"
    if q_heads % kv_heads:
        return f"{q_heads} query heads do not share {kv_heads} KV heads evenly"
    return None


def _attention_words(rows: int, keys: int, dim: int, element_bytes: int, warps: int) -> float:
    """Registers per thread: the float32 output accumulator and the query fragment (a tensor-core
    tile of rows x dim), plus the scores and probabilities of rows x keys (two words each)."""
    return matmul_words(rows, dim, dim, element_bytes, warps) + 2 * tile_words(rows, keys, warps)


def valid_prefill(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind_prefill.binding(PREFILL.name, problem)
    dim = problem.axes(workload)[binding.dim_axis]
    bm, bn = params["BLOCK_M"], params["BLOCK_N"]
    stages, warps = params["NUM_STAGES"], params["NUM_WARPS"]
    longest = triton.next_power_of_2(largest(problem, binding.seq_axis))
    # The Q tile stays; K and V tiles are staged NUM_STAGES deep.
    shared = (bm + 2 * stages * bn) * dim * binding.element_bytes
    return first_reason(
        threads_reason(warps),
        _shape_reason(problem, workload, binding),
        None if max(bm, bn) <= max(16, longest) else
        f"BLOCK_M={bm} or BLOCK_N={bn} is longer than the longest sequence needs",
        shared_memory_reason(shared, f"a {bm}x{dim} Q tile and {stages} stages of K and V"),
        register_reason(_attention_words(bm, bn, dim, binding.element_bytes, warps), warps,
                        f"the {bm}x{dim} accumulator and {bm}x{bn} scores"),
    )


def valid_decode(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind_decode.binding(DECODE.name, problem)
    axes = problem.axes(workload)
    dim = axes[binding.dim_axis]
    group = axes[binding.q_heads_axis] // max(axes[binding.kv_heads_axis], 1)
    bh, bn, split = params["BLOCK_H"], params["BLOCK_N"], params["SPLIT_LEN"]
    stages, warps = params["NUM_STAGES"], params["NUM_WARPS"]
    longest = triton.next_power_of_2(largest(problem, binding.seq_axis))
    shared = (bh + 2 * stages * bn) * dim * binding.element_bytes
    return first_reason(
        threads_reason(warps),
        _shape_reason(problem, workload, binding),
        None if bh <= max(16, triton.next_power_of_2(group)) else
        f"BLOCK_H={bh} is more than the {group} query heads of a KV head need",
        None if split % bn == 0 else f"SPLIT_LEN={split} is not a multiple of BLOCK_N={bn}",
        None if split <= max(bn, longest) else
        f"SPLIT_LEN={split} is longer than the longest cache ({longest} keys) needs",
        shared_memory_reason(shared, f"a {bh}x{dim} Q tile and {stages} stages of K and V"),
        register_reason(_attention_words(bh, bn, dim, binding.element_bytes, warps), warps,
                        f"the {bh}x{dim} accumulator and {bh}x{bn} scores"),
    )


def render_prefill(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind_prefill.binding(PREFILL.name, problem)
    arguments = {"q": binding.q, "k": binding.k, "v": binding.v, "out": binding.out}
    mask = "causal" if binding.causal else "bidirectional"
    summary = (f"FlashAttention-2 style {mask} prefill with GQA: online softmax, float32 "
               "accumulation, scores never stored.")
    return render_kernel(problem.definition, PREFILL.name, params, "attention_prefill.py",
                         {"CAUSAL": binding.causal}, "attention_prefill", arguments, summary)


def render_decode(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind_decode.binding(DECODE.name, problem)
    arguments = {"q": binding.q, "k_cache": binding.k, "v_cache": binding.v,
                 "out": binding.out}
    summary = ("Split-KV decode attention (FlashDecoding): a KV group's query heads share each "
               "KV tile; per-split partial softmax results merged by a second kernel.")
    return render_kernel(problem.definition, DECODE.name, params, "attention_decode.py", {},
                         "attention_decode", arguments, summary)


# Tried first by the search (where valid), before its sampler's random start. Prefill: 128
# queries by 64 keys with 8 warps and 3 stages, FlashAttention-2's usual Hopper tile for
# head_dim 128 (Q 32 KiB resident, K and V 16 KiB each a stage), and the best settings of the
# two attention problems of the first H200 goal run (64x64, 4 warps, 3 stages on FLUX's joint
# attention; 128x64, 8 warps, 2 stages on Whisper's encoder; benchmarks/results/
# h200-forge.jsonl). Decode: one 16-row head block per KV group (8 query heads a group here),
# 64 or 128 keys a step, and splits of 1024 or 2048 keys: from batch 1 at 128k keys (8 groups
# x 128 splits = 1024 programs) to batch 64 at 8k (4096), every workload fills 132 SMs.
PREFILL_SEEDS = tuple({"BLOCK_M": m, "BLOCK_N": n, "NUM_STAGES": stages, "NUM_WARPS": warps}
                      for m, n, stages, warps in ((128, 64, 3, 8), (64, 64, 3, 4),
                                                  (128, 64, 2, 8)))
DECODE_SEEDS = tuple({"BLOCK_H": 16, "BLOCK_N": n, "SPLIT_LEN": split, "NUM_STAGES": 2,
                      "NUM_WARPS": warps}
                     for n, split, warps in ((64, 1024, 4), (128, 2048, 8)))

PREFILL = Template(
    name="attention_prefill",
    family="attention",
    space={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (16, 32, 64, 128),
           "NUM_STAGES": (1, 2, 3, 4), "NUM_WARPS": (4, 8)},
    applies=bind_prefill.applies,
    valid=valid_prefill,
    render=render_prefill,
    seeds=PREFILL_SEEDS,
)
DECODE = Template(
    name="attention_decode",
    family="attention",
    space={"BLOCK_H": (16, 32, 64), "BLOCK_N": (16, 32, 64, 128),
           "SPLIT_LEN": (128, 256, 512, 1024, 2048, 4096, 8192), "NUM_STAGES": (1, 2, 3),
           "NUM_WARPS": (2, 4, 8)},
    applies=bind_decode.applies,
    valid=valid_decode,
    render=render_decode,
    seeds=DECODE_SEEDS,
)
TEMPLATES = (PREFILL, DECODE)
