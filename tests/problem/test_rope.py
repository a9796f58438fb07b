"""A cache RoPE's roles and pairing, recognised once for the forge's template and the library
baseline alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from solforge.problem.rope import recognise_rope
from solforge.problem.suite import open_problem


@pytest.mark.parametrize(("address", "interleaved", "k_heads"), [
    ("fib/rope_qwen3_8b", False, "num_kv_heads"),
    ("fib/rope_deepseek_v3", True, None),  # one key for all heads
    ("l1/rope_cos_sin_cache_qwen3_32b", False, "num_kv_heads"),
])
def test_the_pairing_is_read_off_the_reference(address, interleaved, k_heads):
    roles = recognise_rope(open_problem(address).definition)
    assert roles is not None
    assert roles.interleaved is interleaved
    assert (roles.k_heads_axis is None) is (k_heads is None)


def test_angles_made_inside_the_reference_are_not_a_cache_rope():
    assert recognise_rope(open_problem("l1/rope_llama3_1_8b").definition) is None


def test_a_reference_with_neither_pairing_is_not_recognised():
    definition = open_problem("fib/rope_qwen3_8b").definition
    # the cache read sin-first: the structure fits, the arithmetic matches neither rotation
    swapped = definition.reference.replace(".chunk(2, dim=-1)", ".chunk(2, dim=-1)[::-1]")
    assert swapped != definition.reference
    assert recognise_rope(replace(definition, reference=swapped)) is None
