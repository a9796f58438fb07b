"""The bundled Triton solutions for RoPE, SwiGLU, GeGLU, the MoE router, the GEMM with a bias +
GELU epilogue and FP8 quantisation pass the harness: on the CPU (Triton's interpreter) at each
problem's smallest workload, and on a GPU at every workload."""

from __future__ import annotations

from pathlib import Path

import pytest

import solforge
from solforge.data.solution import load_solution
from solforge.data.trace import Status
from solforge.harness.evaluate import EvalConfig, evaluate
from solforge.problem import open_problem

SOLUTIONS = Path(solforge.__file__).parent / "solutions"
# problem address -> solution file in src/solforge/solutions/<address>/
FILES = {
    "l1/rope_llama3_1_8b": "triton_rope.json",
    "l1/swiglu_llama3_1_8b": "triton_swiglu.json",
    "l1/geglu_gemma3_27b": "triton_geglu.json",
    "l1/moe_topk_router_qwen3_30b_a3b": "triton_router.json",
    "l1/gemm_bias_gelu_whisper_large_v3_fc1": "triton_gemm_bias_gelu.json",
    "quant/fp8_quant_per_token_llama3_1_8b_down": "triton_fp8_quant.json",
}


def _evaluate(address: str, config: EvalConfig) -> list[Status]:
    problem = open_problem(address)
    solution = load_solution(SOLUTIONS / address / FILES[address])
    assert solution.definition == problem.definition.name
    assert solution.languages == ("triton",) and solution.destination_passing_style
    return [trace.evaluation.status for trace in evaluate(problem, solution, config)]


@pytest.mark.parametrize("address", FILES)
def test_solution_passes_on_the_cpu(address, tmp_path):
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, cache_dir=tmp_path)
    assert _evaluate(address, config) == [Status.PASSED]


@pytest.mark.gpu
@pytest.mark.parametrize("address", FILES)
def test_solution_passes_every_workload_on_the_gpu(address, tmp_path):
    config = EvalConfig(device="cuda", baseline="eager", cache_dir=tmp_path)
    statuses = _evaluate(address, config)
    assert statuses == [Status.PASSED] * len(open_problem(address).workloads), statuses
