"""Does a model of some arithmetic reproduce a problem's reference? Run both on one small input.

Problems can share an op_type, dtypes and shapes and still compute different things: Gemma's
RMSNorm scales by (1 + weight), Llama's by weight; Whisper's GELU is the erf form, FLUX's the
tanh one; Gemma-3 scales attention scores by 1/sqrt(168), not 1/sqrt(head_dim); one RoPE rotates
halves, another interleaved pairs. So whoever claims a problem (a forge template for its kernel, a
library baseline for its library call) describes each variant it can compute as a small PyTorch
model of that arithmetic (same roundings), and claims the problem only when one of them
reproduces the reference.

The probe builds one seeded input on the CPU the way the harness does (the definition's custom
input function where it has one, the realistic random generator for the rest), with var axes
and Python scalars the caller chooses small, runs the reference once, and ranks the variants
by their mean relative error. The best is accepted if its largest error stays within AGREEMENT
of the output's magnitude (a few bf16 roundings). A reference that cannot run at the probe's
sizes makes the caller decline the problem: the conservative answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from solforge.data.definition import Definition
from solforge.data.workload import resolve_axes
from solforge.problem.inputs import input_seed, random_tensor
from solforge.problem.outputs import as_output_list
from solforge.problem.problem import tensor_shape
from solforge.problem.reference import load_reference_module

FLOAT_DTYPES = ("float32", "float16", "bfloat16")  # what the recognisers' models compute in
AGREEMENT = 2e-2  # the largest error allowed, relative to the largest output magnitude
PROBE_SEED = 20251129
PROBE_SIZE = 4  # the default value of a var axis in the probe
CPU = torch.device("cpu")

Inputs = Mapping[str, Any]
Model = Callable[[Inputs], Sequence[torch.Tensor]]
Variant = TypeVar("Variant", bound=Hashable)


def matching_variant(definition: Definition, var_axes: Mapping[str, int],
                     scalars: Mapping[str, float | int],
                     variants: Mapping[Variant, Model]) -> Variant | None:
    """The variant whose model reproduces the reference, or None."""
    try:
        inputs = probe_inputs(definition, var_axes, scalars)
        expected = reference_outputs(definition, inputs)
        errors = {variant: output_errors(model(inputs), expected)
                  for variant, model in variants.items()}
    except Exception:  # reference code failing at the probe's sizes: do not claim the problem
        return None
    best = min(errors, key=lambda variant: errors[variant].mean)
    return best if errors[best].max <= AGREEMENT else None


def small_axes(definition: Definition,
               sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """A value for every var axis: `sizes` by axis name, PROBE_SIZE for the others."""
    chosen = sizes or {}
    return {name: chosen.get(name, PROBE_SIZE) for name in definition.var_axes}


def probe_inputs(definition: Definition, var_axes: Mapping[str, int],
                 scalars: Mapping[str, float | int]) -> dict[str, Any]:
    """One input per definition input, in definition order, on the CPU."""
    axes = resolve_axes(definition, var_axes)
    produced = custom_inputs(definition, axes, scalars)
    values: dict[str, Any] = {}
    for name, spec in definition.inputs.items():
        if spec.is_scalar:
            values[name] = scalars[name]
        elif name in produced:
            values[name] = produced[name]
        else:
            generator = torch.Generator(device=CPU).manual_seed(input_seed(PROBE_SEED, name))
            values[name] = random_tensor(name, tensor_shape(spec, axes), spec.dtype, CPU,
                                         generator)
    return values


def custom_inputs(definition: Definition, axes: Mapping[str, int],
                  scalars: Mapping[str, float | int]) -> dict[str, torch.Tensor]:
    """What the definition's custom input function makes at these axes (all of it)."""
    entry = definition.custom_inputs_entrypoint
    if entry is None:
        return {}
    module = load_reference_module(definition)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(PROBE_SEED)
        produced = getattr(module, entry)({**axes, **scalars}, CPU)
    return dict(produced)


def reference_outputs(definition: Definition, inputs: Inputs) -> list[torch.Tensor]:
    module = load_reference_module(definition)
    with torch.no_grad():
        result = module.run(*inputs.values())
    return as_output_list(result, definition)


@dataclass(frozen=True)
class ProbeError:
    mean: float  # relative to the output's largest magnitude; the worst output
    max: float


def output_errors(actual: Sequence[torch.Tensor],
                  expected: Sequence[torch.Tensor]) -> ProbeError:
    """Mean and largest error relative to the largest magnitude of each output."""
    if len(actual) != len(expected):
        raise ValueError(f"model gives {len(actual)} outputs, reference {len(expected)}")
    mean_error = max_error = 0.0
    for model_value, reference_value in zip(actual, expected):
        if model_value.shape != reference_value.shape:
            raise ValueError(f"model shape {tuple(model_value.shape)} differs from the "
                             f"reference's {tuple(reference_value.shape)}")
        reference64 = reference_value.to(torch.float64)
        scale = max(reference64.abs().max().item(), 1e-30) if reference64.numel() else 1.0
        difference = (model_value.to(torch.float64) - reference64).abs() / scale
        if difference.numel():
            mean_error = max(mean_error, difference.mean().item())
            max_error = max(max_error, difference.max().item())
    return ProbeError(mean_error, max_error)
