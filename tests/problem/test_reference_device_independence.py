"""The references of exactly compared problems give the same bits on the GPU as on the CPU.

PyTorch on CUDA computes `tensor / python_number` as `tensor * (1 / number)`, the reciprocal
rounded to the op's math dtype (aten BinaryDivTrueKernel.cu: "if the second operand is a CPU
scalar, compute a * reciprocal(b)"); the CPU divides. The two differ by an ulp for about half the
values. Where outputs are compared with atol 0 (quantisers), that ulp moves codes that land on
e4m3/e2m1 rounding midpoints: fp8_quant_group128_deepseek_v3's reference, `amax / 448.0`, failed
a correct kernel on the H200 (7159 of 7168 codes) that passed on the CPU. So each such reference
runs here on the CPU twice, once with CUDA's rule emulated, and must give the same bits.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from solforge.harness.oracle import same_bits
from solforge.problem import Problem, make_inputs, open_problem
from solforge.problem.outputs import as_output_list
from solforge.problem.reference import load_reference_module
from solforge.problem.suite import address_of, bundled_problem_dirs

EXACT = [address_of(folder) for folder in bundled_problem_dirs()
         if any(w.tolerance.max_atol == 0 for w in open_problem(folder).workloads)]
# The true divisions a reference can write; one with a rounding mode or `out` is left as it is.
DIVISIONS = ((torch.Tensor, "__truediv__"), (torch.Tensor, "div"), (torch.Tensor, "divide"),
             (torch.Tensor, "true_divide"), (torch, "div"), (torch, "divide"),
             (torch, "true_divide"))
IN_PLACE_DIVISIONS = ((torch.Tensor, "__itruediv__"), (torch.Tensor, "div_"),
                      (torch.Tensor, "divide_"), (torch.Tensor, "true_divide_"))


def cuda_scalar_division(dividend: torch.Tensor, divisor: int | float) -> torch.Tensor:
    """`dividend / divisor` as CUDA computes it: times the reciprocal, both in the math dtype
    (float32 for float16 and bfloat16 too), the reciprocal itself an IEEE division."""
    dtype = torch.result_type(dividend, divisor)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()  # true division of integers
    math_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    reciprocal = torch.tensor(1.0, dtype=math_dtype) / torch.tensor(divisor, dtype=math_dtype)
    return (dividend.to(math_dtype) * reciprocal).to(dtype)


def by_a_python_number(dividend: Any, divisor: Any, *args: Any, **kwargs: Any) -> bool:
    return (isinstance(dividend, torch.Tensor) and not dividend.is_complex() and not args
            and not kwargs and isinstance(divisor, (int, float)))


def reference_line() -> str:
    """The line of reference code being run (its source is in linecache, under `<reference`)."""
    frames = [f for f in traceback.extract_stack() if f.filename.startswith("<reference")]
    return f"line {frames[-1].lineno}: {(frames[-1].line or '').strip()}" if frames else "?"


def emulated(dividend: torch.Tensor, divisor: int | float, inexact: list[str]) -> torch.Tensor:
    if abs(math.frexp(divisor)[0]) != 0.5:  # not a power of two: 1 / divisor is rounded
        inexact.append(reference_line())
    return cuda_scalar_division(dividend, divisor)


def emulating(divide: Callable, inexact: list[str]) -> Callable:
    def cuda_divide(dividend: Any, divisor: Any, *args: Any, **kwargs: Any) -> Any:
        if not by_a_python_number(dividend, divisor, *args, **kwargs):
            return divide(dividend, divisor, *args, **kwargs)
        return emulated(dividend, divisor, inexact)

    return cuda_divide


def emulating_in_place(divide: Callable, inexact: list[str]) -> Callable:
    def cuda_divide_(dividend: Any, divisor: Any, *args: Any, **kwargs: Any) -> Any:
        if not by_a_python_number(dividend, divisor, *args, **kwargs):
            return divide(dividend, divisor, *args, **kwargs)
        quotient = emulated(dividend, divisor, inexact)
        if quotient.dtype != dividend.dtype:  # an integer tensor: the division raises
            return divide(dividend, divisor)
        return dividend.copy_(quotient)

    return cuda_divide_


@contextmanager
def cuda_division() -> Iterator[list[str]]:
    """Division by a Python number as CUDA does it, inside the `with` block; the list it gives
    collects the reference lines that divide by a number whose reciprocal is inexact."""
    inexact: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in DIVISIONS:
            patch.setattr(owner, name, emulating(getattr(owner, name), inexact))
        for owner, name in IN_PLACE_DIVISIONS:
            patch.setattr(owner, name, emulating_in_place(getattr(owner, name), inexact))
        yield inexact


def run_reference(problem: Problem, inputs: dict[str, Any]) -> list[Any]:
    module = load_reference_module(problem.definition)
    copies = {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in inputs.items()}
    with torch.no_grad():
        return as_output_list(module.run(**copies), problem.definition)


def test_the_emulation_multiplies_by_the_reciprocal_rounded_to_float32():
    x = torch.tensor([3.0, 100.0, 256.0])
    by_reciprocal = x * (torch.tensor(1.0) / torch.tensor(448.0))
    assert not torch.equal(x / 448.0, by_reciprocal)  # IEEE division: 3 and 100 differ
    with cuda_division() as inexact:
        assert torch.equal(torch.tensor([6, 7]) / 2, torch.tensor([3.0, 3.5]))
        assert not inexact  # 1 / 2 is exact
        assert torch.equal(x / 448.0, by_reciprocal)
        assert torch.equal(torch.div(x, 448.0), by_reciprocal)
        in_place = x.clone()
        in_place /= 448.0
        assert torch.equal(in_place, by_reciprocal)
        assert len(inexact) == 3
        assert not torch.equal(x / torch.tensor(448.0), by_reciprocal)  # a tensor divides
        assert (x.to(torch.bfloat16) / 448.0).dtype == torch.bfloat16


@pytest.mark.parametrize("address", EXACT)
def test_reference_gives_the_same_bits_when_division_multiplies_by_the_reciprocal(address):
    problem = open_problem(address)
    inputs = make_inputs(problem, problem.smallest_workload())
    divided = run_reference(problem, inputs)
    with cuda_division() as inexact:
        multiplied = run_reference(problem, inputs)
    for name, left, right in zip(problem.definition.outputs, divided, multiplied, strict=True):
        assert same_bits(left, right), f"output {name!r} changes if `/ number` multiplies"
    # Outputs this small may happen to agree where a larger workload's do not (one scale of
    # fp8_quant_per_token at M=1): a divisor other than a power of two must be a tensor.
    assert not inexact, f"divides by a Python number on CUDA's inexact path: {set(inexact)}"
