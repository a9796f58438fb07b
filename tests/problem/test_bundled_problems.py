"""The bundled problems: each loads, its reference runs on the CPU, and its numbers are right.

The references of the big-weight problems (GEMM, MLP) are run once, at their smallest workload,
by `check_problem`; the numerical cross-checks use the problems whose inputs are cheap to make.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from solforge.harness.compare import compare_outputs
from solforge.problem import Problem, make_inputs, open_problem, tensor_shape
from solforge.problem.check import run_reference
from solforge.problem.outputs import as_output_list
from solforge.problem.reference import reference_run
from solforge.problem.suite import bundled_problem_dirs

# The first six problems, with checks specific to each; tests/problem/test_suite.py covers
# every problem.
BUNDLED = [
    "l1/rmsnorm_llama3_1_8b",
    "l1/gemm_llama3_1_8b_gate_up",
    "l1/gqa_causal_prefill_llama3_1_8b",
    "l2/swiglu_mlp_llama3_1_8b",
    "quant/fp8_gemm_per_tensor_llama3_1_8b_qkv",
    "l1/moe_topk_router_qwen3_30b_a3b",
]


def at_axes(problem: Problem, **axes: int):
    """A copy of the problem's first workload with its var axes set to `axes`."""
    return dataclasses.replace(problem.workloads[0], axes=axes)


@pytest.mark.parametrize("address", BUNDLED)
def test_description_names_the_model(address):
    description = open_problem(address).definition.description
    assert "Llama-3.1-8B" in description or "Qwen3-30B-A3B" in description
    assert "Tolerance" in description


def test_uuids_are_unique_across_the_suite():
    uuids = [w.uuid for folder in bundled_problem_dirs() for w in open_problem(folder).workloads]
    assert len(uuids) == len(set(uuids))


def test_rmsnorm_eps_is_a_scalar_input_and_norm_weight_is_near_one():
    problem = open_problem("l1/rmsnorm_llama3_1_8b")
    inputs = make_inputs(problem, problem.smallest_workload())
    assert inputs["eps"] == pytest.approx(1e-5)
    assert abs(inputs["norm_weight"].float().mean().item() - 1.0) < 0.01


def test_rmsnorm_matches_float64():
    problem = open_problem("l1/rmsnorm_llama3_1_8b")
    inputs = make_inputs(problem, at_axes(problem, num_tokens=8))
    out = reference_run(problem.definition)(**inputs)
    x = inputs["hidden_states"].double()
    exact = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + inputs["eps"])
    exact = exact * inputs["norm_weight"].double()
    torch.testing.assert_close(out.double(), exact, atol=1e-2, rtol=1e-2)


def test_router_ids_in_range_and_weights_sum_to_one():
    problem = open_problem("l1/moe_topk_router_qwen3_30b_a3b")
    inputs = make_inputs(problem, at_axes(problem, num_tokens=256))
    weights, ids = reference_run(problem.definition)(**inputs)
    assert weights.shape == ids.shape == (256, 8)
    assert ids.min().item() >= 0 and ids.max().item() < 128
    assert all(len(set(row.tolist())) == 8 for row in ids)  # eight distinct experts per token
    torch.testing.assert_close(weights.sum(-1), torch.ones(256), atol=1e-6, rtol=0)
    assert bool((weights[:, :-1] >= weights[:, 1:]).all())  # largest first


def test_router_picks_the_largest_logits_and_breaks_ties_towards_the_lower_id():
    problem = open_problem("l1/moe_topk_router_qwen3_30b_a3b")
    hidden_states = torch.zeros(1, 2048, dtype=torch.bfloat16)
    hidden_states[0, 0] = 1.0
    router_weight = torch.zeros(128, 2048, dtype=torch.bfloat16)
    logits = [4.0, 1.0, 4.0, 2.0, 2.0, 3.0, 1.0, 0.5, 1.0, 1.0]  # experts 0..9; 6, 8, 9 tie with 1
    router_weight[: len(logits), 0] = torch.tensor(logits)
    weights, ids = reference_run(problem.definition)(hidden_states, router_weight)
    assert ids[0].tolist() == [0, 2, 5, 3, 4, 1, 6, 8]
    chosen = torch.tensor([4.0, 4.0, 3.0, 2.0, 2.0, 1.0, 1.0, 1.0])
    torch.testing.assert_close(weights[0], torch.softmax(chosen, dim=0))


def test_fp8_gemm_matches_float64():
    problem = open_problem("quant/fp8_gemm_per_tensor_llama3_1_8b_qkv")
    inputs = make_inputs(problem, at_axes(problem, M=4))
    assert inputs["x_scale"].shape == () and inputs["x_scale"].item() > 0
    assert 0 < inputs["weight_scale"].item() < 2 / math.sqrt(4096)
    out = reference_run(problem.definition)(**inputs)
    x = inputs["x"].double() * inputs["x_scale"].double()
    weight = inputs["weight"].double() * inputs["weight_scale"].double()
    exact = x @ weight.T
    # bfloat16 rounding of the output: half an ulp, 2^-9 relative; float32 accumulation is noise.
    torch.testing.assert_close(out.double(), exact, atol=1e-5, rtol=2**-8)
    assert exact.abs().mean().item() > 0.1  # realistic scales give O(1) outputs


def explicit_causal_gqa(q, k, v):
    """Per query head: scores, mask above the diagonal, softmax, weighted values (float64)."""
    batch, seq, num_qo_heads, head_dim = q.shape
    group = num_qo_heads // k.shape[2]
    above_diagonal = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    out = torch.empty(batch, seq, num_qo_heads, head_dim, dtype=torch.float64)
    for b in range(batch):
        for head in range(num_qo_heads):
            kv_head = head // group
            scores = q[b, :, head].double() @ k[b, :, kv_head].double().T / math.sqrt(head_dim)
            scores = scores.masked_fill(above_diagonal, float("-inf"))
            out[b, :, head] = torch.softmax(scores, dim=-1) @ v[b, :, kv_head].double()
    return out


def test_gqa_matches_an_explicit_masked_softmax():
    problem = open_problem("l1/gqa_causal_prefill_llama3_1_8b")
    inputs = make_inputs(problem, problem.smallest_workload())
    out = reference_run(problem.definition)(**inputs)
    expected = explicit_causal_gqa(inputs["q"], inputs["k"], inputs["v"])
    assert out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)
    # The first query sees only the first key: its output is that key's value row.
    group = 32 // 8
    first = inputs["v"][:, 0].repeat_interleave(group, dim=1)
    torch.testing.assert_close(out[:, 0], first)




@pytest.mark.gpu
@pytest.mark.parametrize("address", BUNDLED)
def test_gpu_reference_runs_at_every_workload(address):
    problem = open_problem(address)
    for workload in problem.workloads:
        values, _ = run_reference(problem, workload.uuid, device="cuda")
        assert all(bool(torch.isfinite(v.float()).all()) for v in values)
        torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("address", BUNDLED)
def test_gpu_and_cpu_references_agree_within_the_workload_tolerance(address):
    """The tolerances leave room for a different device's rounding (a real shape, not the tiny
    one: the second-smallest workload, cheap enough for the CPU)."""
    problem = open_problem(address)
    definition = problem.definition
    workload = sorted(problem.workloads, key=problem.input_elements)[1]
    inputs = make_inputs(problem, workload, "cpu")
    on_gpu = {n: v.cuda() if isinstance(v, torch.Tensor) else v for n, v in inputs.items()}
    run = reference_run(definition)
    with torch.no_grad():
        expected = as_output_list(run(**inputs), definition)
        outputs = as_output_list(run(**on_gpu), definition)
    axes = problem.axes(workload)
    shapes = {n: tensor_shape(s, axes) for n, s in definition.outputs.items()}
    comparison = compare_outputs([v.cpu() for v in outputs], expected, definition, shapes,
                                 workload.tolerance)
    assert comparison.passed, comparison.message
