"""Library baselines: which bundled problems map to which library, and the generated solutions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solforge.harness.library_baselines import (
    ENTRY,
    library_baseline,
    score_against_library,
)
from solforge.problem import make_inputs
from solforge.problem.suite import open_problem

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("address", "name"), [
    ("l1/gqa_causal_prefill_llama3_1_8b", "cudnn-sdpa"),
    ("l1/gemm_llama3_1_8b_qkv", "cublaslt"),
    ("l1/hgemm_fp16", "cublaslt"),
    ("l1/rmsnorm_llama3_1_8b", "flashinfer-rmsnorm"),
    ("l1/rmsnorm_gemma3_27b", "flashinfer-rmsnorm"),
    ("l1/softmax_llama3_1_8b_vocab", None),
    ("quant/fp8_gemm_per_tensor_llama3_1_8b_qkv", None),  # four inputs: not a plain GEMM
])
def test_problems_map_to_the_library_that_implements_them(address, name):
    found = library_baseline(open_problem(address).definition)
    assert (found.name if found else None) == name


def _namespace(address: str) -> dict:
    solution = library_baseline(open_problem(address).definition).solution
    namespace: dict = {}
    exec(compile(solution.sources[0].content, "kernel.py", "exec"), namespace)
    return namespace


def test_gemm_operand_follows_the_weight_layout():
    assert "matmul(x, weight.T)" in library_baseline(
        open_problem("l1/gemm_llama3_1_8b_qkv").definition).solution.sources[0].content
    assert "matmul(a, b)" in library_baseline(
        open_problem("l1/hgemm_fp16").definition).solution.sources[0].content


def test_gemma_rmsnorm_uses_the_one_plus_weight_kernel():
    source = library_baseline(open_problem("l1/rmsnorm_gemma3_27b").definition).solution
    assert "flashinfer.norm.gemma_rmsnorm(" in source.sources[0].content
    assert source.preload_modules() == ("flashinfer",)


def test_cudnn_sdpa_forces_cudnn_with_no_fallback():
    """On the CPU there is no cuDNN attention: the forced backend must fail, not fall back to
    PyTorch's math kernel (which would time the wrong library)."""
    problem = open_problem("l1/attention_whisper_large_v3_encoder")
    workload = problem.smallest_workload()
    inputs = make_inputs(problem, workload)
    function = _namespace("l1/attention_whisper_large_v3_encoder")[ENTRY]
    with pytest.raises(RuntimeError):
        function(*inputs.values())
    reference = _namespace("l1/attention_whisper_large_v3_encoder")["run"]
    assert isinstance(reference(*inputs.values()), torch.Tensor)


def test_score_against_the_library_is_the_sol_score():
    assert score_against_library(2.0, 2.0, 1.0) == pytest.approx(0.5)
    assert score_against_library(1.0, 3.0, 1.0) == pytest.approx(1.0)


@pytest.mark.slow
def test_library_script_cpu_mode_records_why_a_library_cannot_run(tmp_path):
    out = tmp_path / "lib.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "library_baselines_gpu.py"),
                           "l1/gemm_llama3_1_8b_qkv", "l1/softmax_llama3_1_8b_vocab",
                           "--device", "cpu", "-o", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (record,) = json.loads(out.read_text())["problems"]  # softmax maps to no library
    assert record["problem"] == "l1/gemm_llama3_1_8b_qkv" and record["library"] == "cublaslt"
    (result,) = record["workloads"].values()
    try:
        import nvmath  # noqa: F401
    except ImportError:
        assert result["status"] == "COMPILE_ERROR"
        assert "nvmath-python" in result["message"]
    else:
        assert result["status"] in ("PASSED", "RUNTIME_ERROR")
