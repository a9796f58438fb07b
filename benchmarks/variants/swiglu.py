"""Variants of the shipped SwiGLU kernels (l1/swiglu_*: silu(gate) * up over a fused
[tokens, 2 * width] input) that benchmarks/variants_gpu.py times against the shipped kernel and
torch.compile. The shipped kernel runs (token, 1,024 columns) tiles, 4 warps, 8 bfloat16 values
a thread and tensor, and read 0.99x torch.compile's time on the H200 (2026-12-03, 0.87 of
T_SOL): these change the values a thread moves per tensor (16: two 16-byte accesses in flight
each) and the warps a program, and one streams with evict-first hints (every byte is used
once). None beat torch.compile beyond 1% (2026-12-03). The persistent ones (2026-12-04, not yet
timed) run a few programs per SM, each looping over the tiles with the loop software-pipelined
(`tl.range(..., num_stages)`), so the next tile's gate and up loads are in flight while this
tile computes: more bytes in flight per SM without more programs to schedule."""

from functools import partial

import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu(gate_up_ptr, out_ptr, width, gate_up_row_stride, gate_up_col_stride, out_row_stride,
            out_col_stride, BLOCKS_PER_ROW: tl.constexpr, BLOCK: tl.constexpr,
            EVICT: tl.constexpr):
    tile = tl.program_id(0)
    row = (tile // BLOCKS_PER_ROW).to(tl.int64)
    cols = (tile % BLOCKS_PER_ROW) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    row_ptr = gate_up_ptr + row * gate_up_row_stride
    gate = tl.load(row_ptr + cols * gate_up_col_stride, mask=mask, other=0.0,
                   eviction_policy=EVICT).to(tl.float32)
    up = tl.load(row_ptr + (width + cols) * gate_up_col_stride, mask=mask, other=0.0,
                 eviction_policy=EVICT).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols * out_col_stride,
             (silu * up).to(tl.bfloat16), mask=mask, eviction_policy=EVICT)


def tiles(gate_up, out, block, num_warps, evict=""):
    rows, width = out.shape
    blocks_per_row = triton.cdiv(width, block)
    _swiglu[(rows * blocks_per_row,)](gate_up, out, width, *gate_up.stride(), *out.stride(),
                                      BLOCKS_PER_ROW=blocks_per_row, BLOCK=block, EVICT=evict,
                                      num_warps=num_warps)


@triton.jit
def _swiglu_persistent(gate_up_ptr, out_ptr, width, tiles, gate_up_row_stride,
                       gate_up_col_stride, out_row_stride, out_col_stride,
                       BLOCKS_PER_ROW: tl.constexpr, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=STAGES):
        row = tl.cast(tile // BLOCKS_PER_ROW, tl.int64)
        cols = (tile % BLOCKS_PER_ROW) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        row_ptr = gate_up_ptr + row * gate_up_row_stride
        gate = tl.load(row_ptr + cols * gate_up_col_stride, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(row_ptr + (width + cols) * gate_up_col_stride, mask=mask,
                     other=0.0).to(tl.float32)
        silu = (gate / (1.0 + tl.exp(-gate))).to(tl.bfloat16).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols * out_col_stride,
                 (silu * up).to(tl.bfloat16), mask=mask)


def persistent(gate_up, out, block, num_warps, per_sm, stages):
    rows, width = out.shape
    blocks_per_row = triton.cdiv(width, block)
    tiles = rows * blocks_per_row
    sms = (torch.cuda.get_device_properties(out.device).multi_processor_count
           if out.is_cuda else 2)
    _swiglu_persistent[(min(tiles, sms * per_sm),)](
        gate_up, out, width, tiles, *gate_up.stride(), *out.stride(),
        BLOCKS_PER_ROW=blocks_per_row, BLOCK=block, STAGES=stages, num_warps=num_warps)


VARIANTS = {
    "b1024_w4_evict_first": partial(tiles, block=1024, num_warps=4, evict="evict_first"),
    "b2048_w4": partial(tiles, block=2048, num_warps=4),
    "b2048_w8": partial(tiles, block=2048, num_warps=8),
    "b4096_w8": partial(tiles, block=4096, num_warps=8),
    "b512_w2": partial(tiles, block=512, num_warps=2),
    "persistent_b1024_w4_x8_s2": partial(persistent, block=1024, num_warps=4, per_sm=8,
                                         stages=2),
    "persistent_b2048_w8_x4_s2": partial(persistent, block=2048, num_warps=8, per_sm=4,
                                         stages=2),
    "persistent_b1024_w4_x16_s3": partial(persistent, block=1024, num_warps=4, per_sm=16,
                                          stages=3),
}
