"""The comparison's one-pass GPU kernel gives exactly what the float64 torch path gives.

On the CPU the kernel runs in Triton's interpreter (in a process of its own: the interpreter is
chosen when the kernel is defined); on a GPU (`-m gpu`) it runs compiled, against the torch
path on a copy of the same tensors on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solforge.harness import compare

REPO = Path(__file__).resolve().parents[2]

CASES = r'''
import sys, torch
from solforge.data.workload import Tolerance
from solforge.harness import compare_kernel
from solforge.harness.compare import _reductions

device = sys.argv[1]
inf, nan = float("inf"), float("nan")
generator = torch.Generator().manual_seed(7)


def noisy(n, dtype, scale=0.01):
    ref = torch.randn(n, generator=generator).to(dtype)
    out = (ref.double() + scale * torch.randn(n, generator=generator, dtype=torch.float64))
    return out.to(dtype), ref


def cases():
    for n in (1, 7, 2047, 2048, 2049, 10_000):
        for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
            yield f"noise {n} {dtype}", *noisy(n, dtype)
    out, ref = noisy(3000, torch.float32)
    yield "mixed dtypes", out, ref.to(torch.bfloat16)
    yield "equal", ref.clone(), ref
    yield "zeros against values", torch.zeros_like(ref), ref
    yield "zeros against zeros", torch.zeros(5000), torch.zeros(5000)
    for name, value in (("nan", nan), ("inf", inf), ("-inf", -inf)):
        bad = ref.clone()
        bad[2999] = value
        yield f"output {name}", bad, ref
        yield f"reference {name}", ref.clone(), bad
    shared = ref.clone()
    shared[[0, 5, 2500]] = -inf
    yield "shared -inf", shared.clone(), shared
    one_sided = shared.clone()
    one_sided[5] = 1.0
    yield "-inf in the reference alone", one_sided, shared
    tiny = torch.full((4100,), 1e-300, dtype=torch.float64)
    yield "tiny magnitudes", tiny * 3, tiny
    edge = torch.linspace(-4, 4, 4096, dtype=torch.float64)
    yield "on the bound", edge + (0.01 + 0.01 * edge.abs()), edge


tolerances = [Tolerance(), Tolerance(max_atol=0.0, max_rtol=0.0),
              Tolerance(max_atol=1e-3, max_rtol=0.0, allow_negative_inf=True),
              Tolerance(max_atol=0.5, max_rtol=0.25, allow_negative_inf=True)]
checked = 0
for (name, out, ref), tolerance in ((c, t) for c in cases() for t in tolerances):
    floor = max(tolerance.max_atol, torch.finfo(torch.float64).tiny)
    fused = compare_kernel.tally(out.to(device), ref.to(device), tolerance.max_atol,
                                 tolerance.max_rtol, floor, tolerance.allow_negative_inf)
    plain = _reductions(out, ref, tolerance)
    # The maxima are meaningless (NaN or not) where a NaN or Inf ends the comparison anyway
    ends = any(plain[:3])
    if fused[:3] != plain[:3] or (not ends and fused != plain):
        raise SystemExit(f"{name}, {tolerance}: kernel {fused} != torch {plain}")
    checked += 1
print("checked", checked)
from solforge.harness import compare
print("trusted", compare.one_pass_trusted(torch.device(device)))
print("warmed", compare_kernel.warm_up({torch.bfloat16, torch.float32, torch.int64}, {True},
                                       torch.device(device)))
'''


def _run_cases(device: str, env: dict[str, str]) -> str:
    finished = subprocess.run([sys.executable, "-c", CASES, device], capture_output=True,
                              text=True, timeout=600, env=env, cwd=REPO)
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-3000:]
    return finished.stdout


def test_the_kernel_in_triton_interpreter_matches_the_float64_torch_path():
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    found = _run_cases("cpu", env)
    assert "checked 152" in found
    assert "trusted True" in found  # the first use's own check passes
    assert "warmed 4" in found  # two lengths for each float dtype; integers never take it


@pytest.mark.gpu
def test_on_the_gpu_the_compiled_kernel_matches_the_float64_torch_path():
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    found = _run_cases("cuda", env)
    assert "checked 152" in found and "trusted True" in found


def test_only_float_tensors_of_one_gpu_take_the_kernel():
    """CPU tensors (and so every CPU run) keep the torch path; so do integers, on any device."""
    from solforge.harness import compare_kernel

    values = torch.arange(8, dtype=torch.float32)
    assert not compare_kernel.eligible(values, values)
    assert not compare_kernel.eligible(values.to(torch.int32), values.to(torch.int32))
    assert compare._reductions(values, values.clone(), compare.Tolerance())[3:5] == [8.0, 8.0]


def test_an_interpreted_kernel_never_takes_a_gpus_tensors(monkeypatch):
    """Under TRITON_INTERPRET=1 (the tests' setting) the kernel would copy a GPU output's
    every block through the host: minutes for one comparison. Such a process keeps the torch
    path on the GPU too; a compiled kernel takes the pair."""
    from types import SimpleNamespace

    from solforge.harness import compare_kernel

    assert compare_kernel.interpreted()  # this process imported Triton in its interpreter
    device = torch.device("cuda", 0)
    flat = SimpleNamespace(is_cuda=True, device=device, dtype=torch.bfloat16, dim=lambda: 1,
                           numel=lambda: 64, is_contiguous=lambda: True)
    assert not compare_kernel.eligible(flat, flat)
    monkeypatch.setattr(compare_kernel, "interpreted", lambda: False)
    assert compare_kernel.eligible(flat, flat)


COMPILE = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from solforge.harness.compare_kernel import BLOCK, OPTIONS, _tally_blocks

for dtype in ("*bf16", "*fp16", "*fp32", "*fp64"):
    signature = {"out_ptr": dtype, "ref_ptr": dtype, "limits_ptr": "*fp64",
                 "partials_ptr": "*fp64", "n": "i32", "ALLOW_NEG_INF": "constexpr",
                 "BLOCK": "constexpr"}
    for allow in (False, True):
        source = ASTSource(_tally_blocks, signature, {"ALLOW_NEG_INF": allow, "BLOCK": BLOCK})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options=OPTIONS)
        print(dtype, allow, len(compiled.asm["cubin"]) > 0,
              compiled.asm["ptx"].count("fma.rn.f64"))
'''


def test_the_kernel_compiles_for_hopper_without_fused_multiply_adds():
    """Compiled here for sm_90 as the GPU would (no GPU needed; Triton out of its interpreter):
    every float dtype and -inf rule builds, and no bound `atol + rtol * |ref|` is rounded once
    where torch rounds twice."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    finished = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True,
                              timeout=600, env=env, cwd=REPO)
    assert finished.returncode == 0, finished.stderr[-3000:]
    lines = finished.stdout.split("\n")
    built = [line.split() for line in lines if line.startswith("*")]
    assert len(built) == 8
    assert all(row[2] == "True" and row[3] == "0" for row in built), built


class _FakeKernel:
    """A stand-in for compare_kernel: takes every slice, and answers wrong or fails."""

    def __init__(self, answer):
        self.answer = answer

    def eligible(self, out, ref):
        return True

    def tally(self, *args):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer", [[0.0] * 9, RuntimeError("launch failed")])
def test_a_kernel_that_disagrees_or_fails_on_its_check_is_never_used(monkeypatch, capsys,
                                                                      answer):
    monkeypatch.setattr(compare, "_kernel", lambda: _FakeKernel(answer))
    monkeypatch.setattr(compare, "_ONE_PASS_TRUSTED", {})
    assert compare.one_pass_trusted(torch.device("cpu")) is False
    assert "use the float64 torch path" in capsys.readouterr().err
    values = torch.arange(4, dtype=torch.float32)
    assert compare._one_pass(values, values, compare.Tolerance()) is None


def test_a_trusted_kernel_that_fails_later_hands_over_to_the_float64_path(monkeypatch, capsys):
    monkeypatch.setattr(compare, "_kernel", lambda: _FakeKernel(RuntimeError("out of memory")))
    monkeypatch.setattr(compare, "_ONE_PASS_TRUSTED", {torch.device("cpu"): True})
    values = torch.arange(4, dtype=torch.float32)
    assert compare._one_pass(values, values, compare.Tolerance()) is None
    assert compare._ONE_PASS_TRUSTED[torch.device("cpu")] is False
    assert "out of memory" in capsys.readouterr().err
