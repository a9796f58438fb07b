"""Softmax and log-softmax over the last axis, optionally of logits / temperature.

Applies to a problem with one floating tensor input (and at most one Python-scalar float: the
temperature) and one floating output of the same shape, whose reference the probe matches to
softmax or log-softmax in float32 (of x / temperature when there is a temperature), rounded
once to the output dtype: vocabulary softmax, attention-score softmax, log-probabilities.

Knobs: ROWS per program, BLOCK, NUM_WARPS and METHOD: single_pass (the row in registers) or
two_pass (online softmax: a max-and-sum sweep with rescaling, then a write sweep) for rows too
wide for registers, such as 128K-token vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

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
from solforge.problem.probe import (
    FLOAT_DTYPES,
    Inputs,
    Model,
    matching_variant,
    small_axes,
)
from solforge.problem.problem import Problem

PROBE_TEMPERATURE = 0.7


@dataclass(frozen=True)
class SoftmaxBinding:
    x: str
    out: str
    temperature: str | None
    cols_axis: str
    log: bool


def _model(x: str, temperature: str | None, log: bool, dtype: torch.dtype) -> Model:
    def model(inputs: Inputs) -> list[torch.Tensor]:
        logits = inputs[x].to(torch.float32)
        if temperature is not None:
            logits = logits / inputs[temperature]
        function = torch.log_softmax if log else torch.softmax
        return [function(logits, dim=-1).to(dtype)]

    return model


def _match(definition: Definition) -> SoftmaxBinding | None:
    tensors = [spec for spec in definition.inputs.values() if not spec.is_scalar]
    scalars = [spec for spec in definition.inputs.values() if spec.is_scalar]
    if len(tensors) != 1 or len(scalars) > 1 or len(definition.outputs) != 1:
        return None
    (x,), (out,) = tensors, definition.outputs.values()
    if not usable_names(definition) or not x.shape or x.shape != out.shape:
        return None
    if x.dtype.name not in FLOAT_DTYPES or out.dtype.name not in FLOAT_DTYPES:
        return None
    if scalars and scalars[0].dtype.kind != "float":
        return None
    temperature = scalars[0].name if scalars else None
    variants = {log: _model(x.name, temperature, log, out.dtype.torch_dtype)
                for log in (False, True)}
    probe_scalars = {temperature: PROBE_TEMPERATURE} if temperature else {}
    found = matching_variant(definition, small_axes(definition), probe_scalars, variants)
    if found is None:
        return None
    return SoftmaxBinding(x.name, out.name, temperature, x.shape[-1], found)


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = bind.binding(TEMPLATE.name, problem)
    cols = problem.axes(workload)[binding.cols_axis]
    widest = largest(problem, binding.cols_axis)
    rows, block, warps = params["ROWS"], params["BLOCK"], params["NUM_WARPS"]
    single = params["METHOD"] == "single_pass"
    return first_reason(
        threads_reason(warps),
        idle_threads_reason(rows * block, warps, "ROWS * BLOCK"),
        row_block_reason(block, cols, widest, single),
        register_reason(2 * tile_words(rows, block, warps), warps, "the logits and exponentials"),
    )


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = bind.binding(TEMPLATE.name, problem)
    constants = {"LOG": binding.log, "HAS_TEMPERATURE": binding.temperature is not None}
    arguments = {"x": binding.x, "out": binding.out}
    if binding.temperature is not None:
        arguments["temperature"] = binding.temperature
    function = "log-softmax" if binding.log else "softmax"
    divided = " of logits / temperature" if binding.temperature else ""
    summary = f"Row {function}{divided} over the last axis, float32 arithmetic."
    return render_kernel(problem.definition, TEMPLATE.name, params, "softmax.py", constants,
                         "softmax", arguments, summary)


TEMPLATE = Template(
    name="softmax",
    family="row_reduction",
    space={"ROWS": (1, 2, 4, 8, 16), "BLOCK": (256, 512, 1024, 2048, 4096, 8192, 16384),
           "NUM_WARPS": (1, 2, 4, 8, 16), "METHOD": ("single_pass", "two_pass")},
    applies=bind.applies,
    valid=valid,
    render=render,
)
