"""Templates: each one recognises its problems, rejects settings an H200 block cannot hold,
renders a standalone kernel that compiles for sm_90 and passes the harness on the CPU."""

from __future__ import annotations

import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from helpers import FIXTURES as TEST_FIXTURES
from helpers import Computed, selected_keys

from solforge.data.solution import parse_solution
from solforge.data.trace import Status
from solforge.forge.capture import CaptureJob, DescriptorError, capture_solutions
from solforge.forge.descriptors import describe_kernels
from solforge.forge.templates import FAMILIES, TEMPLATES, template_named, templates_for
from solforge.forge.templates.template import TemplateError
from solforge.harness import EvalConfig, evaluate
from solforge.problem.suite import open_problem

FIXTURES = TEST_FIXTURES / "templates"

# One case per template: template -> (problem, settings valid on all its workloads). The GEMM
# and attention cases use small fixture problems with ragged edges; the rest are bundled
# problems, run at their tiny workload.
CASES = {
    "activation": ("l1/geglu_gemma3_27b", {"BLOCK": 2048, "NUM_WARPS": 8, "VECTOR": 8}),
    "row_norm": ("l1/rmsnorm_gemma3_27b",
                 {"ROWS": 2, "BLOCK": 8192, "NUM_WARPS": 8, "METHOD": "single_pass"}),
    "softmax": ("l1/log_softmax_qwen3_8b_vocab",
                {"ROWS": 1, "BLOCK": 16384, "NUM_WARPS": 16, "METHOD": "two_pass"}),
    "cross_entropy": ("l1/cross_entropy_llama3_1_8b",
                      {"ROWS": 16, "BLOCK": 1024, "NUM_WARPS": 16}),
    "rope": ("fib/rope_deepseek_v3", {"TOKENS": 2, "HEADS": 32, "NUM_WARPS": 4}),
    "gemm": ("l1/gemm_llama3_1_8b_qkv", {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128,
                                         "GROUP_M": 8, "NUM_STAGES": 3, "NUM_WARPS": 4}),
    "gemm_persistent": (FIXTURES / "linear_bias_silu_ragged",
                        {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                         "NUM_STAGES": 3, "NUM_WARPS": 4}),
    "gemm_tma": (FIXTURES / "linear_bias_silu_ragged",
                 {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "NUM_STAGES": 3,
                  "NUM_WARPS": 4}),
    "gemm_split_k": (FIXTURES / "linear_bias_silu_ragged",
                     {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 2,
                      "NUM_STAGES": 3, "NUM_WARPS": 4}),
    "attention_prefill": (FIXTURES / "gqa_causal_prefill_ragged",
                          {"BLOCK_M": 16, "BLOCK_N": 16, "NUM_STAGES": 2, "NUM_WARPS": 4}),
    "attention_decode": (FIXTURES / "gqa_decode_split",
                         {"BLOCK_H": 16, "BLOCK_N": 32, "SPLIT_LEN": 128, "NUM_STAGES": 2,
                          "NUM_WARPS": 4}),
    "moe_grouped_gemm": ("quant/fp8_moe_gemm_block128_qwen3_30b_a3b_down",
                         {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "NUM_STAGES": 3,
                          "NUM_WARPS": 4}),
    "gemm_scaled": ("quant/fp8_gemm_block128_deepseek_v3_o_proj",
                    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                     "NUM_STAGES": 3, "NUM_WARPS": 4}),
}
# More paths through the same kernels, still one harness run each: the erf GELU, a two-pass
# LayerNorm with a residual, and the bundled (bidirectional, float16) attention of a real model.
EXTRA_CASES = {
    "activation gelu_erf": ("activation", "l1/gelu_whisper_large_v3",
                            {"BLOCK": 2048, "NUM_WARPS": 8, "VECTOR": 8}),
    "row_norm two_pass": ("row_norm", "l1/add_layernorm_whisper_large_v3",
                          {"ROWS": 4, "BLOCK": 512, "NUM_WARPS": 4, "METHOD": "two_pass"}),
    "attention_prefill bundled": ("attention_prefill", "l1/attention_whisper_large_v3_encoder",
                                  {"BLOCK_M": 16, "BLOCK_N": 16, "NUM_STAGES": 2,
                                   "NUM_WARPS": 4}),
}
HARNESS_CASES = {name: (name, *case) for name, case in CASES.items()} | EXTRA_CASES


def test_every_template_has_a_case_and_a_family():
    assert set(CASES) == {template.name for template in TEMPLATES}
    assert set(FAMILIES) == {"elementwise", "row_reduction", "rope", "gemm", "attention", "moe",
                             "fp8_gemm"}


@pytest.mark.parametrize("name", list(CASES))
def test_case_settings_are_valid_and_in_the_space(name):
    template = template_named(name)
    address, params = CASES[name]
    problem = open_problem(address)
    assert template.applies(problem.definition)
    assert all(params[knob] in choices for knob, choices in template.space.items())
    assert template.invalid_reason(params, problem) is None


@pytest.mark.parametrize(("address", "expected"), [
    ("l1/swiglu_llama3_1_8b", {"activation"}),
    ("l1/gelu_whisper_large_v3", {"activation"}),
    ("l1/rmsnorm_llama3_1_8b", {"row_norm"}),
    ("fib/fused_add_rmsnorm_qwen3_32b", {"row_norm"}),
    ("l1/softmax_llama3_1_8b_attn_scores", {"softmax"}),
    ("l1/softmax_qwen3_8b_vocab_temperature", {"softmax"}),
    ("l1/cross_entropy_gemma3_27b", {"cross_entropy"}),
    ("l1/rope_cos_sin_cache_qwen3_32b", {"rope"}),
    ("l1/lm_head_qwen3_8b",
     {"gemm", "gemm_persistent", "gemm_tma", "gemm_split_k"}),
    ("l1/gemm_bias_gelu_whisper_large_v3_fc1",
     {"gemm", "gemm_persistent", "gemm_tma", "gemm_split_k"}),
    ("l1/mqa_causal_prefill_falcon_7b", {"attention_prefill"}),
    ("l1/mqa_decode_falcon_7b", {"attention_decode"}),
    ("quant/fp8_moe_gemm_block128_deepseek_v3_gate_up", {"moe_grouped_gemm"}),
    ("quant/w8a8_int8_gemm_llama3_1_70b_qkv", {"gemm_scaled"}),
    # Look-alikes the probe must turn down: another attention scale (1/sqrt(168)), frequencies
    # computed in the reference, an adaLN modulation instead of a weight, a fused MLP block.
    ("l1/gqa_causal_prefill_gemma3_27b", set()),
    ("l1/gqa_decode_gemma3_27b", set()),
    ("l1/rope_llama3_1_8b", set()),
    ("l1/layernorm_adaln_flux_1_dev", set()),
    ("l2/swiglu_mlp_llama3_1_8b", set()),
])
def test_templates_recognise_their_problems(address, expected):
    found = {template.name for template in templates_for(open_problem(address).definition)}
    assert found == expected


def test_the_probe_tells_variants_apart():
    """Same structure, different arithmetic: each problem gets the kernel variant it needs."""
    gemma = template_named("row_norm").render(CASES["row_norm"][1],
                                              open_problem("l1/rmsnorm_gemma3_27b"))
    llama = template_named("row_norm").render(CASES["row_norm"][1],
                                              open_problem("l1/rmsnorm_llama3_1_8b"))
    assert 'WEIGHT = "offset"' in gemma["sources"][0]["content"]
    assert 'WEIGHT = "scale_rounded"' in llama["sources"][0]["content"]
    params = {"BLOCK": 1024, "NUM_WARPS": 4, "VECTOR": 8}
    erf = template_named("activation").render(params, open_problem("l1/gelu_whisper_large_v3"))
    tanh = template_named("activation").render(params, open_problem("l1/gelu_tanh_flux_1_dev"))
    assert 'ACTIVATION = "gelu_erf"' in erf["sources"][0]["content"]
    assert 'ACTIVATION = "gelu_tanh"' in tanh["sources"][0]["content"]


def test_rendered_solution_is_standalone_with_constants_in_the_source():
    address, params = CASES["gemm"]
    problem = open_problem(address)
    solution = template_named("gemm").render(params, problem)
    source = solution["sources"][0]["content"]
    assert solution["spec"]["entry_point"] == "kernel.py::run"
    assert solution["spec"]["destination_passing_style"] is True
    assert solution["definition"] == problem.name
    for knob, value in params.items():
        assert f"\n{knob} = {value}\n" in source
    assert "def run(x, weight, out):\n" in source
    assert "solforge" not in source.split('"""', 2)[2]  # imports nothing of the project
    parse_solution(solution)  # the harness accepts it


def test_valid_rejects_a_setting_over_the_shared_memory_budget():
    template = template_named("gemm")
    problem = open_problem("l1/gemm_llama3_1_8b_qkv")
    huge = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "NUM_STAGES": 5,
            "NUM_WARPS": 8}
    reason = template.invalid_reason(huge, problem)
    # 5 stages x (256 + 256) x 128 bf16 values = 655,360 bytes > 227 KB
    assert reason is not None and "655360 bytes of shared memory" in reason
    fits = {**huge, "BLOCK_N": 128, "BLOCK_K": 32, "NUM_STAGES": 2}  # 48 KB
    assert template.invalid_reason(fits, problem) is None


@pytest.mark.parametrize(("name", "address", "params", "phrase"), [
    ("gemm", "l1/gemm_llama3_1_8b_qkv", {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32,
                                         "GROUP_M": 8, "NUM_STAGES": 2, "NUM_WARPS": 4},
     "registers per thread"),
    ("softmax", "l1/softmax_llama3_1_8b_vocab",
     {"ROWS": 1, "BLOCK": 16384, "NUM_WARPS": 8, "METHOD": "single_pass"},
     "BLOCK=16384 < 128256"),
    ("gemm", FIXTURES / "linear_bias_silu_ragged",
     {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "NUM_STAGES": 2,
      "NUM_WARPS": 4}, "K=96 is not a multiple of BLOCK_K=64"),
    ("activation", "l1/swiglu_llama3_1_8b", {"BLOCK": 256, "NUM_WARPS": 16, "VECTOR": 8},
     "no VECTOR=8 run"),
])
def test_valid_names_the_limit_a_setting_breaks(name, address, params, phrase):
    reason = template_named(name).invalid_reason(params, open_problem(address))
    assert reason is not None and phrase in reason


def test_a_template_refuses_a_problem_it_does_not_apply_to():
    with pytest.raises(TemplateError, match="does not apply"):
        template_named("rope").render({"TOKENS": 1, "HEADS": 8, "NUM_WARPS": 2},
                                      open_problem("l1/rmsnorm_llama3_1_8b"))


# --- compiling for the H200 (sm_90) on this CPU machine -----------------------------------

HOPPER_TILES = {"BLOCK_M": 64}  # the interpreter-sized row tiles of CASES, raised for wgmma
# The archive cell each template's kernel lands in (forge.descriptors reads the compiled code):
# the templates seed distinct cells, and each uses the hardware path it is built on.
EXPECTED_CELLS = {
    "activation": {"memory_path": "vector16", "compute_path": "cuda_core"},
    "row_norm": {"memory_path": "vector16", "compute_path": "cuda_core"},
    "softmax": {"memory_path": "vector16", "compute_path": "cuda_core"},
    "cross_entropy": {"memory_path": "vector16", "compute_path": "cuda_core"},
    "rope": {"compute_path": "cuda_core", "parallel": "tile_per_program"},
    "gemm": {"memory_path": "smem_cp_async", "compute_path": "wgmma",
             "parallel": "tile_per_program"},
    "gemm_persistent": {"compute_path": "wgmma", "parallel": "persistent"},
    "gemm_tma": {"memory_path": "tma", "compute_path": "wgmma"},
    # Its partials go to a float32 workspace, not through float atomics (the split_k rule).
    "gemm_split_k": {"compute_path": "wgmma", "parallel": "tile_per_program"},
    "attention_prefill": {"compute_path": "wgmma"},
    "attention_decode": {"compute_path": "mma_sync"},  # 16-row head tiles: below wgmma's 64
    "moe_grouped_gemm": {"compute_path": "wgmma"},
    "gemm_scaled": {"compute_path": "wgmma"},
}
# The register screen against ptxas (cuobjdump's count): a setting it accepts fits in 255
# registers; one it rejects makes ptxas hit the 255 cap.
SCREEN_CHECKS = {
    "screen accepts gemm 128x128x64": (
        "gemm", "l1/gemm_llama3_1_8b_qkv", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64,
                                            "GROUP_M": 8, "NUM_STAGES": 3, "NUM_WARPS": 4}, True),
    "screen rejects attention 64x128": (
        "attention_prefill", "l1/gqa_causal_prefill_llama3_1_8b",
        {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "NUM_WARPS": 4}, False),
}


@pytest.fixture(scope="module")
def captured(request) -> dict[str, object]:
    """The launches of each case and screen check the selected tests read, compiled for sm_90
    in one fresh process (forge.descriptors)."""
    cases = {name: (name, address, params) for name, (address, params) in CASES.items()}
    cases |= {label: check[:3] for label, check in SCREEN_CHECKS.items()}

    def capture(labels: list[str]) -> list[object]:
        jobs = []
        for label in labels:
            name, address, params = cases[label]
            problem = open_problem(address)
            if label in CASES and "BLOCK_M" in params:
                params = {**params, **HOPPER_TILES}
                assert template_named(name).invalid_reason(params, problem) is None
            solution = parse_solution(template_named(name).render(params, problem))
            jobs.append(CaptureJob(solution, problem, problem.smallest_workload()))
        return capture_solutions(jobs, target="sm_90", sass=True)

    return Computed(capture).fetch(selected_keys(request, "name") +
                                   selected_keys(request, "label"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_rendered_kernel_compiles_for_sm90(captured, name):
    kernels = captured[name]
    assert not isinstance(kernels, DescriptorError), str(kernels)
    assert kernels and all(kernel.cubin for kernel in kernels)
    cell = dataclasses.asdict(describe_kernels(kernels))
    assert {axis: cell[axis] for axis in EXPECTED_CELLS[name]} == EXPECTED_CELLS[name]


@pytest.mark.parametrize("label", list(SCREEN_CHECKS))
def test_register_screen_agrees_with_ptxas(captured, label):
    name, address, params, accepted = SCREEN_CHECKS[label]
    assert (template_named(name).invalid_reason(params, open_problem(address)) is None) == accepted
    registers = captured[label][0].registers
    assert registers < 255 if accepted else registers == 255


# --- the harness on the CPU --------------------------------------------------------------


@pytest.fixture(scope="module")
def harness_traces(tmp_path_factory):
    """Every harness case, evaluated a few at a time (each evaluation spawns workers)."""
    cache = tmp_path_factory.mktemp("cache")
    # One timed call, compared (a CPU time is not scored): as many outputs checked as with
    # a warm-up and two timed calls, of which one was compared, in a third of the timed calls.
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, warmup=0, iterations=1,
                        verify=1, secret=20251129, cache_dir=cache)

    def run_case(case: tuple) -> list:
        name, address, params = case
        problem = open_problem(address)
        solution = parse_solution(template_named(name).render(params, problem))
        return evaluate(problem, solution, config)

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {label: pool.submit(run_case, case) for label, case in HARNESS_CASES.items()}
        return {label: future.result() for label, future in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("label", list(HARNESS_CASES))
def test_rendered_kernel_passes_the_harness_on_the_cpu(harness_traces, label):
    traces = harness_traces[label]
    assert [trace.evaluation.status for trace in traces] == [Status.PASSED], \
        traces[0].evaluation.log


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_rendered_kernel_passes_the_harness_on_the_gpu(name, tmp_path):
    """On the GPU, at every workload of the case's problem, with the GPU-sized row tile."""
    address, params = CASES[name]
    if "BLOCK_M" in params:
        params = {**params, **HOPPER_TILES}
    problem = open_problem(address)
    config = EvalConfig(device="cuda", baseline="eager", rounds=2, warmup=2, iterations=5,
                        verify=2, cache_dir=tmp_path)
    traces = evaluate(problem, parse_solution(template_named(name).render(params, problem)),
                      config)
    failed = {trace.workload["uuid"]: trace.evaluation.log for trace in traces
              if trace.evaluation.status is not Status.PASSED}
    assert len(traces) == len(problem.workloads) and not failed, failed


@pytest.mark.parametrize("kernel", ["gemm", "gemm_tma", "gemm_scaled"])
def test_template_kernels_carry_the_shared_tile_order_verbatim(kernel):
    """A rendered candidate is standalone, so the GEMM kernels copy `solforge.tiling`; the copy
    must stay the same function (a drifted copy would launch tiles in another order)."""
    import inspect

    from solforge import tiling
    from solforge.forge.templates import kernels

    shared = inspect.getsource(tiling.tile_coordinates.fn)
    source = (Path(kernels.__file__).parent / f"{kernel}.py").read_text()
    copy = shared.replace("def tile_coordinates(", "def _tile_coordinates(")
    assert copy in source


@pytest.mark.parametrize("address", ["l1/gemm_llama3_1_8b_o_proj", "l1/gemm_llama3_1_70b_down",
                                     "l1/gqa_causal_prefill_qwen3_32b",
                                     "l1/gqa_decode_llama3_1_70b"])
def test_the_seeds_are_valid_on_the_goal_runs_problems(address):
    """The settings a GEMM or attention search starts from (their templates' seeds) fit the
    H200 on these problems: a seed the validity rules turned down would silently leave the
    search to its sampler."""
    problem = open_problem(address)
    templates = templates_for(problem.definition)
    assert templates
    for template in templates:
        assert template.seeds
        assert all(template.invalid_reason(seed, problem) is None for seed in template.seeds)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_prefill_is_exact_whatever_the_blocks(causal, monkeypatch):
    """The prefill kernel scores the key blocks wholly below the diagonal (or inside the
    sequence) without a mask and masks the rest: right for query and key blocks of different
    sizes and sequences that end mid-block (Triton's interpreter, against PyTorch's SDPA)."""
    import importlib

    import torch.nn.functional as F

    kernel = importlib.import_module("solforge.forge.templates.kernels.attention_prefill")
    monkeypatch.setattr(kernel, "CAUSAL", causal)
    generator = torch.Generator().manual_seed(0)
    for (block_m, block_n), seq_len in itertools.product([(16, 32), (32, 16), (16, 64)],
                                                           (37, 70)):
        monkeypatch.setattr(kernel, "BLOCK_M", block_m)
        monkeypatch.setattr(kernel, "BLOCK_N", block_n)
        q, k, v = (torch.randn(1, seq_len, heads, 16, generator=generator,
                               dtype=torch.bfloat16) for heads in (4, 2, 2))
        out = torch.empty_like(q)
        kernel.attention_prefill(q, k, v, out)
        expected = F.scaled_dot_product_attention(
            q.transpose(1, 2).float(), k.repeat_interleave(2, 2).transpose(1, 2).float(),
            v.repeat_interleave(2, 2).transpose(1, 2).float(), is_causal=causal)
        error = (out.float() - expected.transpose(1, 2)).abs().max().item()
        assert error < 3e-2, (block_m, block_n, seq_len, error)


def test_the_erf_gelu_is_within_float32_steps_of_the_exact_one(monkeypatch):
    """The activation kernel's erf GELU (Abramowitz and Stegun 7.1.26) against the exact one in
    float64, over both signs, the origin and past the point where the exp2 underflows, written
    to float32 so that the approximation itself is measured (Triton's interpreter)."""
    import importlib

    import torch.nn.functional as F

    kernel = importlib.import_module("solforge.forge.templates.kernels.activation")
    for name, value in {"ACTIVATION": "gelu_erf", "GATED": False, "ROUND_ACTIVATION": False,
                        "BLOCK": 1024, "VECTOR": 1}.items():
        monkeypatch.setattr(kernel, name, value)
    x = torch.cat([torch.linspace(-16.0, 16.0, 4001), torch.tensor([0.0, -0.0, 1e-30, -1e-30,
                                                                    40.0, -40.0])])
    x = x.reshape(1, -1)
    out = torch.empty_like(x)
    kernel.activation(x, out)
    exact = F.gelu(x.double())
    # erf within 1.5e-7 gives 0.5 |x| 1.5e-7; float32 rounding adds a few steps of the result.
    bound = 0.75e-7 * x.double().abs() + 4 * torch.finfo(torch.float32).eps * exact.abs() + 1e-30
    error = (out.double() - exact).abs()
    assert bool((error <= bound).all()), float((error / bound).max())
    assert out[0, -2] == 40.0 and out[0, -1] == 0.0
