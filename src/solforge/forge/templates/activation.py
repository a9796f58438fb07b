"""Elementwise activations and their gated forms: SiLU, GELU (erf, tanh), SwiGLU, GeGLU.

Applies to a problem with one 2-D floating input and one output of the same dtype and rows:
the same width (plain: out = act(x)) or half of it (gated, vLLM's [gate | up] layout:
out = act(gate) * up), whose reference the probe matches to one activation and one rounding
(act(gate) rounded to the output dtype before the product, or not).

Knobs: BLOCK (columns per program), NUM_WARPS, VECTOR (elements per access; 8 bf16 = one
16-byte vector). The op is memory-bound (a few FLOPs per element): the knobs trade the number of
programs against the bytes each thread has in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

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
    register_reason,
    threads,
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

ACTIVATIONS = ("silu", "gelu_tanh", "gelu_erf")
ACCESS_BYTES = 16  # the widest global load or store of one thread


@dataclass(frozen=True)
class ActivationBinding:
    source: str  # the input's name
    out: str
    width_axis: str  # the output's last axis
    element_bytes: int
    gated: bool
    activation: str
    round_activation: bool


def _torch_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return F.silu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.gelu(x)


def _model(source: str, dtype: torch.dtype, gated: bool, activation: str,
           round_activation: bool) -> Model:
    """The kernel's arithmetic in PyTorch: float32, rounded where the kernel rounds."""
    def model(inputs: Inputs) -> list[torch.Tensor]:
        x = inputs[source].to(torch.float32)
        if not gated:
            return [_torch_activation(x, activation).to(dtype)]
        gate, up = x.chunk(2, dim=-1)
        y = _torch_activation(gate, activation)
        if round_activation:
            y = y.to(dtype).to(torch.float32)
        return [(y * up).to(dtype)]

    return model


def _match(definition: Definition) -> ActivationBinding | None:
    if len(definition.inputs) != 1 or len(definition.outputs) != 1:
        return None
    (x,), (out,) = definition.inputs.values(), definition.outputs.values()
    if not usable_names(definition) or x.shape is None or out.shape is None:
        return None
    if len(x.shape) != 2 or len(out.shape) != 2 or x.shape[0] != out.shape[0]:
        return None
    if x.dtype != out.dtype or x.dtype.name not in FLOAT_DTYPES:
        return None
    gated = x.shape[1] != out.shape[1]
    rounds = (True, False) if gated else (False,)
    variants = {(activation, rounded): _model(x.name, x.dtype.torch_dtype, gated, activation,
                                              rounded)
                for activation in ACTIVATIONS for rounded in rounds}
    found = matching_variant(definition, small_axes(definition), {}, variants)
    if found is None:
        return None
    activation, rounded = found
    return ActivationBinding(x.name, out.name, out.shape[1], x.dtype.bits // 8, gated,
                             activation, rounded)


bind = Matcher(_match)


def valid(params: Params, problem: Problem, workload: Workload) -> str | None:
    binding = _binding(problem)
    width = problem.axes(workload)[binding.width_axis]
    block, warps, vector = params["BLOCK"], params["NUM_WARPS"], params["VECTOR"]
    arrays = 3 if binding.gated else 2  # gate, up and the result; or x and the result
    return first_reason(
        threads_reason(warps),
        _vector_reason(vector, binding.element_bytes, width),
        None if block >= vector * threads(warps) else
        f"BLOCK={block} gives some of the {threads(warps)} threads no VECTOR={vector} run",
        None if block <= max(largest(problem, binding.width_axis), vector * threads(warps)) else
        f"BLOCK={block} is wider than the widest row",
        register_reason(arrays * tile_words(1, block, warps), warps, "the block's values"),
    )


def _vector_reason(vector: int, element_bytes: int, width: int) -> str | None:
    if vector * element_bytes > ACCESS_BYTES:
        return f"VECTOR={vector} elements of {element_bytes} bytes exceed a 16-byte access"
    if width % vector:
        return f"rows of {width} elements are not whole VECTOR={vector} runs"
    return None


def render(params: Params, problem: Problem) -> dict[str, Any]:
    binding = _binding(problem)
    constants = {"ACTIVATION": binding.activation, "GATED": binding.gated,
                 "ROUND_ACTIVATION": binding.round_activation}
    form = f"{binding.activation}(gate) * up" if binding.gated else f"{binding.activation}(x)"
    summary = f"Elementwise {form} over rows, float32 arithmetic, fused reads and writes."
    return render_kernel(problem.definition, TEMPLATE.name, params, "activation.py", constants,
                         "activation", {"x": binding.source, "out": binding.out}, summary)


def _binding(problem: Problem) -> ActivationBinding:
    return bind.binding(TEMPLATE.name, problem)


TEMPLATE = Template(
    name="activation",
    family="elementwise",
    space={"BLOCK": (256, 512, 1024, 2048, 4096), "NUM_WARPS": (1, 2, 4, 8, 16),
           "VECTOR": (1, 2, 4, 8)},
    applies=bind.applies,
    valid=valid,
    render=render,
)
