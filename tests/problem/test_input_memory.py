"""Random inputs are drawn with one float32 temporary: the shaping is done in place.

On the H200 the DeepSeek-V3 MoE block's expert stack (28 GiB as a float32 draw) was scaled out
of place, a second 28 GiB temporary, and both the driver and the baseline's worker ran out of
memory. The values must stay the ones the out-of-place formulas gave: stored traces and the
tests' expected outputs depend on them.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from solforge.data.dtypes import DTYPES
from solforge.problem.inputs import random_tensor

SHAPE = (64, 96)
# name -> the values the out-of-place formulas gave, from the float32 draw
CASES = {
    "input_layernorm_weight": lambda n: 1.0 + 0.05 * n,
    "norm_bias": lambda n: 0.05 * n,
    "variance": lambda n: n.abs() + 0.1,
    "expert_gate_up_weight": lambda n: n / SHAPE[-1] ** 0.5,
    "hidden_states": lambda n: n,
}


class FullSizeFloat32(TorchDispatchMode):
    """Counts the float32 tensors of the full shape that each op makes."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        fresh = isinstance(out, torch.Tensor) and not any(
            out.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in inputs)
        if fresh and out.dtype == torch.float32 and tuple(out.shape) == SHAPE:
            self.made.append(str(func))
        return out


def _draw(name: str, dtype: str) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return random_tensor(name, SHAPE, DTYPES[dtype], torch.device("cpu"), generator)


def test_values_are_those_of_the_out_of_place_formulas() -> None:
    normal = torch.randn(SHAPE, generator=torch.Generator().manual_seed(7))
    for name, formula in CASES.items():
        expected = formula(normal.clone()).to(torch.bfloat16)
        assert torch.equal(_draw(name, "bfloat16").view(torch.int16),
                           expected.view(torch.int16)), name


def test_one_float32_temporary_per_input() -> None:
    for name in CASES:
        with FullSizeFloat32() as mode:
            _draw(name, "bfloat16")
        assert len(mode.made) == 1, (name, mode.made)  # the draw itself
