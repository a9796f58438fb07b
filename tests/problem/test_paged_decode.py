"""Paged decode attention recognised from the structure and a run of the reference: its roles,
its caches' layout, and the references that only look like it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from solforge.data.definition import TensorSpec
from solforge.problem.paged_decode import recognise_paged_decode
from solforge.problem.suite import open_problem

PAGED = ["fib/gqa_paged_decode_llama3_1_8b_ps1", "fib/gqa_paged_decode_llama3_1_8b_ps16",
         "fib/gqa_paged_decode_llama3_1_70b_ps16", "fib/gqa_paged_decode_llama3_1_70b_ps64",
         "fib/gqa_paged_decode_qwen3_30b_a3b_ps64"]


@pytest.mark.parametrize("address", PAGED)
def test_the_bundled_paged_decodes_are_recognised_with_their_layout(address):
    roles = recognise_paged_decode(open_problem(address).definition)
    assert roles is not None and roles.layout == "NHD"
    assert (roles.q, roles.k_cache, roles.indptr, roles.sm_scale, roles.out) == \
        ("q", "k_cache", "kv_indptr", "sm_scale", "out")


@pytest.mark.parametrize("address", ["l1/gqa_decode_llama3_1_8b",
                                     "fib/paged_kv_append_llama3_1_8b_ps16",
                                     "fib/gqa_ragged_prefill_llama3_1_8b"])
def test_other_attention_problems_are_not(address):
    assert recognise_paged_decode(open_problem(address).definition) is None


def _hnd(definition):
    """The same op with caches stored [pages, kv_heads, page_size, head_dim]."""
    axes = ["num_pages", "num_kv_heads", "page_size", "head_dim"]
    inputs = {name: replace(spec, shape=tuple(axes)) if name in ("k_cache", "v_cache")
              else spec for name, spec in definition.inputs.items()}
    assert all(isinstance(spec, TensorSpec) for spec in inputs.values())
    reference = definition.reference.replace(
        "page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]",
        "page_size, num_kv_heads = k_cache.shape[2], k_cache.shape[1]")
    reference = reference.replace("k_cache[table]", "k_cache.transpose(1, 2)[table]")
    reference = reference.replace("v_cache[table]", "v_cache.transpose(1, 2)[table]")
    assert reference.count("transpose(1, 2)") == 2
    return replace(definition, inputs=inputs, reference=reference)


def test_the_layout_is_read_off_the_reference():
    definition = open_problem("fib/gqa_paged_decode_llama3_1_8b_ps16").definition
    assert recognise_paged_decode(_hnd(definition)).layout == "HND"


def test_a_reference_that_ignores_the_given_scale_is_not_recognised():
    """FlashInfer applies the scale it is given; a reference with its own constant computes
    something else at the probe's scale."""
    definition = open_problem("fib/gqa_paged_decode_llama3_1_8b_ps16").definition
    own_scale = definition.reference.replace("* sm_scale", "* head_dim ** -0.5")
    assert own_scale != definition.reference
    assert recognise_paged_decode(replace(definition, reference=own_scale)) is None
