"""The single-operator l1 problems compute what their descriptions say: references checked
against float64 or an independent formula (tests/problem/test_suite.py checks and costs every
problem)."""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from solforge.harness.compare import compare_outputs
from solforge.problem import Problem, make_inputs, open_problem, tensor_shape
from solforge.problem.reference import reference_run


def at_axes(problem: Problem, **axes: int):
    """The problem's last workload (real sizes, its tolerance) with some var axes changed."""
    workload = problem.workloads[-1]
    return dataclasses.replace(workload, axes={**workload.axes, **axes})


def passes_tolerance(problem: Problem, workload, outputs: list, expected: list) -> bool:
    definition = problem.definition
    axes = problem.axes(workload)
    shapes = {n: tensor_shape(s, axes) for n, s in definition.outputs.items()}
    return compare_outputs(outputs, expected, definition, shapes, workload.tolerance).passed


def test_softmax_probabilities_match_float64_and_bfloat16_rounding_fails():
    problem = open_problem("l1/softmax_llama3_1_8b_vocab")
    workload = at_axes(problem, num_tokens=4)
    logits = make_inputs(problem, workload)["logits"]
    probs = reference_run(problem.definition)(logits)
    exact = torch.softmax(logits.double(), dim=-1).float()
    assert passes_tolerance(problem, workload, [exact], [probs])
    rounded = probs.to(torch.bfloat16).float()
    assert not passes_tolerance(problem, workload, [rounded], [probs])


def test_temperature_sharpens_the_distribution():
    problem = open_problem("l1/softmax_qwen3_8b_vocab_temperature")
    run = reference_run(problem.definition)
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    torch.testing.assert_close(run(logits, 0.5), torch.softmax(logits * 2, dim=-1))
    assert run(logits, 0.6)[0, 0] > run(logits, 1.0)[0, 0]


def test_cross_entropy_skips_ignored_labels_and_matches_float64():
    problem = open_problem("l1/cross_entropy_llama3_1_8b")
    inputs = make_inputs(problem, at_axes(problem, num_tokens=16))
    labels = inputs["labels"]
    ignored = labels == -100
    assert int(ignored.sum()) == 4  # a quarter of the positions
    assert bool((labels[~ignored] >= 0).all()) and bool((labels < 128256).all())
    losses, loss = reference_run(problem.definition)(**inputs)
    exact = F.cross_entropy(inputs["logits"].double(), labels, ignore_index=-100,
                            reduction="none")
    torch.testing.assert_close(losses.double(), exact, atol=1e-4, rtol=1e-4)
    assert bool((losses[ignored] == 0).all())
    torch.testing.assert_close(loss.double(), exact[~ignored].mean(), atol=1e-4, rtol=1e-4)


def test_topk_values_are_the_largest_logits_at_their_ids():
    problem = open_problem("l1/topk_gemma3_27b_vocab")
    logits = make_inputs(problem, at_axes(problem, num_tokens=3))["logits"]
    values, indices = reference_run(problem.definition)(logits)
    assert values.shape == indices.shape == (3, 64)
    torch.testing.assert_close(values, logits.gather(1, indices), atol=0, rtol=0)
    assert bool((values[:, :-1] >= values[:, 1:]).all())  # largest first
    kth_largest = logits.sort(dim=-1, descending=True).values[:, 63]
    torch.testing.assert_close(values[:, -1], kth_largest, atol=0, rtol=0)


def test_argmax_breaks_ties_towards_the_lowest_id():
    problem = open_problem("l1/sampling_argmax_llama3_1_8b")
    logits = torch.zeros(2, 128256, dtype=torch.bfloat16)
    logits[0, [7, 90000, 100]] = 3.0
    logits[1, 128255] = 1.0
    token_ids = reference_run(problem.definition)(logits)
    assert token_ids.tolist() == [7, 128255]


def test_embedding_gathers_rows_and_gemma_scales_by_bfloat16_sqrt_hidden():
    plain = open_problem("l1/embedding_llama3_1_8b")
    inputs = make_inputs(plain, plain.smallest_workload())
    rows = reference_run(plain.definition)(**inputs)
    assert torch.equal(rows, inputs["embed_tokens_weight"][inputs["input_ids"].long()])
    scaled = open_problem("l1/embedding_gemma3_27b_scaled")
    inputs = make_inputs(scaled, scaled.smallest_workload())
    out = reference_run(scaled.definition)(**inputs)
    table_rows = inputs["embed_tokens_weight"][inputs["input_ids"].long()]
    assert torch.equal(out, (table_rows.float() * 73.5).to(torch.bfloat16))
    assert float(torch.tensor(math.sqrt(5376)).to(torch.bfloat16)) == 73.5


def test_mamba2_conv_is_causal():
    problem = open_problem("l1/depthwise_conv1d_mamba2_2_7b_causal")
    inputs = make_inputs(problem, problem.smallest_workload())
    run = reference_run(problem.definition)
    before = run(**inputs)
    changed = inputs["xbc"].clone()
    changed[:, 10] += 1.0  # token 10 may only affect outputs 10..13
    after = run(changed, inputs["conv_weight"], inputs["conv_bias"])
    assert torch.equal(before[:, :10], after[:, :10])
    assert not torch.equal(before[:, 10:14], after[:, 10:14])
    assert torch.equal(before[:, 14:], after[:, 14:])


def test_whisper_conv2_halves_the_frames():
    problem = open_problem("l1/conv1d_whisper_large_v3_conv2")
    assert problem.axes(at_axes(problem, num_frames=3000))["out_frames"] == 1500


def test_patch_embeddings_are_one_gemm_per_patch():
    problem = open_problem("l1/conv3d_qwen3_vl_8b_patch_embed")
    workload = problem.smallest_workload()
    inputs = make_inputs(problem, workload)
    out = reference_run(problem.definition)(**inputs)
    weight = inputs["proj_weight"].double().reshape(1152, -1)  # [hidden, 3 * 2 * 16 * 16]
    exact = inputs["pixel_values"].double() @ weight.T + inputs["proj_bias"].double()
    assert passes_tolerance(problem, workload, [exact.to(torch.bfloat16)], [out])
    assert 0.3 < exact.std().item() < 3.0  # the weight scale keeps activations O(1)
