"""Block limits come from the hardware profile, and agree with the CUDA guide's figures."""

from __future__ import annotations

from solforge.hardware import load_profile
from solforge.hardware.block_limits import (
    REGISTERS_PER_SM,
    SHARED_MEMORY_PER_BLOCK,
    TARGET,
    shared_memory_per_block,
    shared_memory_reason,
)
from solforge.hgemm import space


def test_the_target_is_the_h200_with_the_guides_hopper_limits():
    assert load_profile("H200") == TARGET
    assert SHARED_MEMORY_PER_BLOCK == 227 * 1024  # compute capability 9.0: 227 KB per block
    assert REGISTERS_PER_SM == 64 * 1024


def test_an_ampere_block_gets_ampere_shared_memory():
    assert shared_memory_per_block(load_profile("A100")) == 163 * 1024  # capability 8.0


def test_the_reason_names_the_limit_and_the_gpu():
    assert shared_memory_reason(SHARED_MEMORY_PER_BLOCK, "tiles") is None
    reason = shared_memory_reason(SHARED_MEMORY_PER_BLOCK + 1, "tiles")
    assert reason is not None and str(SHARED_MEMORY_PER_BLOCK) in reason and TARGET.name in reason


def test_the_hgemm_pruning_model_reads_the_profile():
    assert space.SM_COUNT == TARGET.sm_count == 132
    assert TARGET.dram_bytes_per_s == space.DRAM_BYTES_PER_S
    assert TARGET.peaks["tensor.fp16"] == space.TENSOR_PEAK_FLOPS
