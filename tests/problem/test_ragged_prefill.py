"""Ragged prefill attention recognised from the structure and a run of the reference: its roles,
its mask, and the references that only look like it."""

from __future__ import annotations

from dataclasses import replace

import fake_flashinfer
import pytest
import torch

from solforge.problem.ragged_prefill import (
    RaggedPrefillRoles,
    ragged_prefill_model,
    recognise_ragged_prefill,
)
from solforge.problem.suite import open_problem

RAGGED = ["fib/gqa_ragged_prefill_llama3_1_8b", "fib/gqa_ragged_prefill_qwen3_30b_a3b"]


@pytest.mark.parametrize("address", RAGGED)
def test_the_bundled_ragged_prefills_are_recognised_as_causal(address):
    roles = recognise_ragged_prefill(open_problem(address).definition)
    assert roles is not None and roles.causal
    assert (roles.q, roles.k, roles.v, roles.qo_indptr, roles.kv_indptr, roles.sm_scale,
            roles.out) == ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale", "out")


@pytest.mark.parametrize("address", ["l1/gqa_causal_prefill_llama3_1_8b",
                                     "fib/gqa_paged_decode_llama3_1_8b_ps16",
                                     "l1/gqa_decode_llama3_1_8b"])
def test_other_attention_problems_are_not(address):
    assert recognise_ragged_prefill(open_problem(address).definition) is None


def _reference(definition, old: str, new: str):
    assert old in definition.reference
    return replace(definition, reference=definition.reference.replace(old, new))


def test_the_mask_is_read_off_the_reference():
    """Without the causal term, the same reference attends to every token of its sequence."""
    definition = open_problem(RAGGED[0]).definition
    full = _reference(definition, "(pos[:, None] >= pos[None, :]) & ", "")
    roles = recognise_ragged_prefill(full)
    assert roles is not None and not roles.causal


def test_a_reference_that_ignores_the_given_scale_is_not_recognised():
    """FlashInfer applies the scale it is given; a reference with its own constant computes
    something else at the probe's scale."""
    definition = open_problem(RAGGED[0]).definition
    own_scale = _reference(definition, "scale=sm_scale", "scale=q.shape[-1] ** -0.5")
    assert recognise_ragged_prefill(own_scale) is None


def test_with_a_cached_prefix_the_model_aligns_queries_with_the_last_keys():
    """With more keys than queries (a prefix already cached), FlashInfer's causal query i sees
    keys 0 .. i + kv_len - qo_len. The recogniser's model agrees with the stand-in written
    from FlashInfer's documentation (its tril mask), and differs from a mask aligned at the
    first key."""
    qo_indptr = torch.tensor([0, 2, 7], dtype=torch.int32)
    kv_indptr = torch.tensor([0, 5, 11], dtype=torch.int32)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(7, 4, 8, generator=generator)
    k, v = (torch.randn(11, 2, 8, generator=generator) for _ in range(2))
    roles = RaggedPrefillRoles("q", "k", "v", "qo_indptr", "kv_indptr", "scale", "out",
                               causal=True)
    inputs = {"q": q, "k": k, "v": v, "qo_indptr": qo_indptr, "kv_indptr": kv_indptr,
              "scale": 0.3}
    (modelled,) = ragged_prefill_model(roles)(inputs)
    wrapper = fake_flashinfer.RaggedPrefillWrapper(torch.zeros(8, dtype=torch.uint8))
    wrapper.plan(qo_indptr, kv_indptr, 4, 2, 8, causal=True, sm_scale=0.3)
    torch.testing.assert_close(modelled, wrapper.run(q, k, v))
    first_aligned = torch.nn.functional.scaled_dot_product_attention(
        q[:2].transpose(0, 1), k[:5].repeat_interleave(2, 1).transpose(0, 1),
        v[:5].repeat_interleave(2, 1).transpose(0, 1),
        attn_mask=torch.tril(torch.ones(2, 5, dtype=torch.bool)), scale=0.3)
    assert not torch.allclose(modelled[:2], first_aligned.transpose(0, 1), atol=1e-3)
