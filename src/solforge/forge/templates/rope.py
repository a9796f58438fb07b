"""Rotary position embedding of q and k with a cos/sin cache and per-token positions.

Applies to a problem with inputs q [tokens, q_heads, dim], k [tokens, k_heads, dim] (or
[tokens, dim]: one key for all heads), integer positions [tokens] and a floating cos/sin cache
[max_positions, dim], in that order, and outputs shaped as q and k; the probe matches the
reference to the half-rotation (NeoX) or the interleaved (GPT-J) pairing, float32 arithmetic,
one rounding. Problems that compute their frequencies inside the reference (theta, YaRN or
llama3 scaling, M-RoPE streams) are left alone: their constants are not in the definition's
structure.

Knobs: TOKENS and HEADS per program (how much work shares one cos/sin row), NUM_WARPS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from solforge.data.definition import Definition, TensorSpec
from solforge.data.workload import Workload
from solforge.forge.templates.probe import Inputs, Model, matching_variant, small_axes
from solforge.forge.templates.template import (
    FLOAT_DTYPES,
    Matcher,
    Params,
    Template,
    render_kernel,
    usable_names,
)
from solforge.hardware.block_limits import (
    first_reason,
    register_reason,
    threads,
    threads_reason,
    tile_words,
)
from solforge.problem.problem import Problem


@dataclass(frozen=True)
class RopeBinding:
    q: str
    k: str
    positions: str
    cache: str
    q_out: str
    k_out: str
    dim_axis: str
    q_heads_axis: str
    k_heads_axis: str | None  # None: k has no head axis
    interleaved: bool


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            interleaved: bool) -> torch.Tensor:
    x32 = x.to(torch.float32)
    if interleaved:
        a, b = x32[..., 0::2], x32[..., 1::2]
        return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2).to(x.dtype)
    a, b = x32.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(x.dtype)


def _model(roles: RopeBinding, interleaved: bool) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        rows = inputs[roles.cache][inputs[roles.positions]].to(torch.float32)
        cos, sin = rows.chunk(2, dim=-1)  # [tokens, dim / 2]
        k = inputs[roles.k]
        k_cos, k_sin = (cos[:, None], sin[:, None]) if k.dim() == 3 else (cos, sin)
        return [_rotate(inputs[roles.q], cos[:, None], sin[:, None], interleaved),
                _rotate(k, k_cos, k_sin, interleaved)]

    return model


def _match(definition: Definition) -> RopeBinding | None:
    roles = _roles(definition)
    if roles is None:
        return None
    variants = {interleaved: _model(roles, interleaved) for interleaved in (False, True)}
    found = matching_variant(definition, small_axes(definition), {}, variants)
    return None if found is None else replace(roles, interleaved=found)


def _roles(definition: Definition) -> RopeBinding | None:
    if len(definition.inputs) != 4 or len(definition.outputs) != 2:
        return None
    if not usable_names(definition) or any(s.is_scalar for s in definition.inputs.values()):
        return None
    q, k, positions, cache = definition.inputs.values()
    q_out, k_out = definition.outputs.values()
    if len(q.shape) != 3 or len(k.shape) not in (2, 3) or q_out.shape != q.shape:
        return None
    if k_out.shape != k.shape or k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        return None
    if positions.shape != q.shape[:1] or positions.dtype.kind != "int":
        return None
    if len(cache.shape) != 2 or cache.shape[1] != q.shape[-1] or not _floats(cache, q, k):
        return None
    if not (q.dtype == k.dtype == q_out.dtype == k_out.dtype):
        return None
    k_heads = k.shape[1] if len(k.shape) == 3 else None
    return RopeBinding(q.name, k.name, positions.name, cache.name, q_out.name, k_out.name,
                       q.shape[2], q.shape[1], k_heads, False)


def _floats(*specs: TensorSpec) -> bool:
    return all(spec.dtype.name in FLOAT_DTYPES for spec in specs)


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    axes = problem.axes(workload)
    half = axes[binding.dim_axis] // 2
    most_heads = max(axes[binding.q_heads_axis],
                     axes[binding.k_heads_axis] if binding.k_heads_axis else 1)
    tokens, heads, warps = params["TOKENS"], params["HEADS"], params["NUM_WARPS"]
    pairs = tokens * heads * half
    return first_reason(
        threads_reason(warps),
        None if half & (half - 1) == 0 else f"head_dim / 2 = {half} is not a power of two",
        None if heads <= most_heads else f"HEADS={heads} is more than the {most_heads} heads",
        None if pairs >= threads(warps) else
        f"{pairs} channel pairs per program leave some of the {threads(warps)} threads idle",
        register_reason(4 * tile_words(1, pairs, warps), warps, "the pairs and their angles"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    arguments = {"q": binding.q, "k": binding.k, "positions": binding.positions,
                 "cos_sin_cache": binding.cache, "q_out": binding.q_out,
                 "k_out": binding.k_out}
    pairing = "interleaved (GPT-J)" if binding.interleaved else "half-rotation (NeoX)"
    summary = f"RoPE from a cos/sin cache, {pairing} pairs, float32 rotation."
    return render_kernel(problem.definition, TEMPLATE.name, params, "rope.py",
                         {"INTERLEAVED": binding.interleaved}, "rope", arguments, summary)


TEMPLATE = Template(
    name="rope",
    family="rope",
    space={"TOKENS": (1, 2, 4, 8), "HEADS": (1, 2, 4, 8, 16, 32), "NUM_WARPS": (1, 2, 4, 8)},
    applies=bind.applies,
    valid=valid,
    render=render,
)
