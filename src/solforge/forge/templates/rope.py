"""Rotary position embedding of q and k with a cos/sin cache and per-token positions.

Applies to the problems problem/rope.py recognises: q, k, integer positions and a floating
[max_positions, dim] cos/sin cache in, q and k rotated out, with the reference's pairing (NeoX
halves or GPT-J interleaved pairs) read off a run of it; float32 arithmetic, one rounding.

Knobs: TOKENS and HEADS per program (how much work shares one cos/sin row), NUM_WARPS.
"""

from __future__ import annotations

from typing import Any

from solforge.data.definition import Definition
from solforge.data.workload import Workload
from solforge.forge.templates.template import (
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
from solforge.problem.rope import RopeRoles, recognise_rope


def _match(definition: Definition) -> RopeRoles | None:
    return recognise_rope(definition) if usable_names(definition) else None


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
