"""Triton's per-process cache keys are computed ahead, so a candidate's first call finds them."""

from __future__ import annotations

import pytest

from solforge.harness import jit_keys

triton = pytest.importorskip("triton")


def test_the_keys_are_computed_once_and_the_jit_later_finds_them_kept():
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas_version
    from triton.runtime.cache import triton_key

    triton_key.cache_clear()
    get_ptxas_version.cache_clear()
    assert jit_keys.compute(GPUTarget("cuda", 90, 32))
    assert triton_key.cache_info().currsize == 1
    assert get_ptxas_version.cache_info().currsize == 1
    hits = triton_key.cache_info().hits
    triton_key()  # what the JIT's first lookup of a kernel calls
    assert triton_key.cache_info().hits == hits + 1


def test_a_key_that_cannot_be_computed_is_left_to_the_jit(monkeypatch):
    from triton.backends.compiler import GPUTarget
    from triton.runtime import cache

    assert jit_keys.compute(GPUTarget("cuda", 90, 32))

    def broken():
        raise OSError("libtriton unreadable")

    monkeypatch.setattr(cache, "triton_key", broken)
    assert jit_keys.compute(GPUTarget("cuda", 90, 32)) is False
