"""The bundled Triton solutions pass the harness: norms, softmax, cross-entropy, embedding,
RoPE, SwiGLU, GeGLU, the MoE router, the GEMM with a bias + GELU epilogue and FP8 quantisation.

Each solution runs through the full harness on the CPU (Triton's interpreter) at its problem's
smallest workload, two solutions at a time; on a GPU (`gpu` mark) at every workload. The
smallest workloads only reach the launch shapes for few rows, so the shapes used for many rows
(whole-row softmax programs looping over rows, cross-entropy without column chunks, one row per
program) are checked here directly against PyTorch on small inputs.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

import solforge
from solforge.data.solution import load_solution
from solforge.data.trace import Status
from solforge.harness.evaluate import EvalConfig, evaluate
from solforge.problem.suite import open_problem

SOLUTIONS = Path(solforge.__file__).parent / "solutions"
BUNDLED = {
    "l1/rmsnorm_llama3_1_8b": "triton_rmsnorm.json",
    "l1/layernorm_whisper_large_v3": "triton_layernorm.json",
    "l1/add_rmsnorm_llama3_1_8b": "triton_add_rmsnorm.json",
    "l1/softmax_llama3_1_8b_vocab": "triton_online_softmax.json",
    "l1/cross_entropy_llama3_1_8b": "triton_cross_entropy.json",
    "l1/embedding_llama3_1_8b": "triton_embedding.json",
    "l1/rope_llama3_1_8b": "triton_rope.json",
    "l1/swiglu_llama3_1_8b": "triton_swiglu.json",
    "l1/geglu_gemma3_27b": "triton_geglu.json",
    "l1/moe_topk_router_qwen3_30b_a3b": "triton_router.json",
    "l1/gemm_bias_gelu_whisper_large_v3_fc1": "triton_gemm_bias_gelu.json",
    "quant/fp8_quant_per_token_llama3_1_8b_down": "triton_fp8_quant.json",
}


def _solution_path(address: str) -> Path:
    return SOLUTIONS / address / BUNDLED[address]


def _statuses(address: str, config: EvalConfig) -> list[tuple[str, Status, str]]:
    problem = open_problem(address)
    solution = load_solution(_solution_path(address), problem.name)
    return [(t.workload["uuid"], t.evaluation.status, t.evaluation.log[:600])
            for t in evaluate(problem, solution, config)]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, list[tuple[str, Status, str]]]:
    # The CPU's correctness rounds, and a short timed loop (a CPU time is not scored) whose two
    # calls' outputs are both compared: the default verifies 3 of 10. No warm-up call: on the
    # CPU it only repeats the interpreter's work, and its output is never compared.
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, warmup=0, iterations=2,
                        cache_dir=tmp_path_factory.mktemp("solutions_cache"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = pool.map(lambda address: _statuses(address, config), BUNDLED)
        return dict(zip(BUNDLED, found))


@pytest.mark.slow
@pytest.mark.parametrize("address", BUNDLED)
def test_solution_passes_the_harness_on_cpu(address, verdicts):
    results = verdicts[address]
    assert results, f"{address}: no workload evaluated"
    failed = [r for r in results if r[1] is not Status.PASSED]
    assert failed == []


@pytest.mark.gpu
@pytest.mark.parametrize("address", BUNDLED)
def test_solution_passes_every_workload_on_gpu(address, tmp_path):
    config = EvalConfig(device="cuda", baseline="eager", cache_dir=tmp_path)
    failed = [r for r in _statuses(address, config) if r[1] is not Status.PASSED]
    assert failed == []


@pytest.mark.parametrize("address", BUNDLED)
def test_solution_names_its_problem(address):
    solution = load_solution(_solution_path(address), "unused")
    assert solution.definition == open_problem(address).name
    assert solution.languages == ("triton",)
    assert solution.destination_passing_style


def _kernel_module(address: str, tmp_path: Path) -> ModuleType:
    """The solution's kernel.py as a module (Triton reads a kernel's source from its file)."""
    source = load_solution(_solution_path(address), "unused").sources[0].content
    path = tmp_path / "kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kernel_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_softmax_whole_rows_loop_over_rows(tmp_path):
    kernel = _kernel_module("l1/softmax_llama3_1_8b_vocab", tmp_path)
    logits = (3 * torch.randn(5, 20000)).bfloat16()
    probs = torch.empty(5, 20000)
    kernel.softmax_whole_rows(logits, probs, 1)  # 2 programs for 5 rows: each loops over rows
    expected = torch.softmax(logits, dim=-1, dtype=torch.float32)
    torch.testing.assert_close(probs, expected, rtol=1e-4, atol=1e-12)


@pytest.mark.parametrize(("chunk_len", "rows_per_program"), [(20000, 1), (8192, 1), (8192, 4)])
def test_cross_entropy_chunks_and_row_tiles(tmp_path, chunk_len, rows_per_program):
    kernel = _kernel_module("l1/cross_entropy_llama3_1_8b", tmp_path)
    logits = (2 * torch.randn(7, 20000)).bfloat16()
    labels = torch.randint(0, 20000, (7,))
    labels[1::3] = kernel.IGNORE_INDEX
    losses, loss = torch.empty(7), torch.empty(())
    kernel.cross_entropy_into(logits, labels, losses, loss, chunk_len, rows_per_program)
    expected = F.cross_entropy(logits.float(), labels, reduction="none")
    torch.testing.assert_close(losses, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, expected.sum() / (labels != kernel.IGNORE_INDEX).sum(),
                               rtol=1e-4, atol=1e-4)
