"""Row normalisation: RMSNorm and LayerNorm, each with or without a fused residual add.

Applies to the problems problem/row_norm.py recognises (x and an optional residual [rows,
hidden], a [hidden] weight and optional bias, a scalar eps; the norm and the weight's form read
off a run of the reference: Llama's bf16 product, LayerNorm's float32 affine, Gemma's 1 +
weight).

Knobs: ROWS per program, BLOCK (columns held at once), NUM_WARPS and METHOD: single_pass (the
row in registers, BLOCK >= hidden) or two_pass (the row streamed twice in BLOCK pieces, for rows
too wide for registers).
"""

from __future__ import annotations

from typing import Any

from solforge.data.definition import Definition
from solforge.data.workload import Workload
from solforge.forge.templates.template import (
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
from solforge.problem.problem import Problem
from solforge.problem.row_norm import RowNormRoles, recognise_row_norm

NORM_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm"}


def _match(definition: Definition) -> RowNormRoles | None:
    return recognise_row_norm(definition) if usable_names(definition) else None


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
