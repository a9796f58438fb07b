"""Grouped GEMM of a mixture of experts: rows sorted by expert, FP8 with block scales.

x is [rows, K] (FP8 e4m3) with one float32 scale per row per GROUP_K-wide group of K; weight
is [experts, N, K] with one scale per GROUP_N x GROUP_K tile; rows expert_offsets[e] to
expert_offsets[e + 1] - 1 are routed to expert e, and out[r] = x[r] @ weight[e]^T in bfloat16.

The grid is flat over row tiles: an expert with c rows needs ceil(c / BLOCK_M) tiles, so
ceil(rows / BLOCK_M) + experts tiles always suffice (each expert adds at most one partial
tile). Each program walks the offsets to find its expert and first row, without a host sync,
and exits if it has no tile; an expert with no rows costs nothing and its weights are never
read. The K loop feeds FP8 tiles to the tensor cores and scales each BLOCK_K slice (inside one
scale group) as it is accumulated in float32: sum_k (x s_x)(w s_w) = s_x s_w sum_k x w per
group.
"""

import triton
import triton.language as tl

# Template parameters (rewritten by render).
BLOCK_M = 64
BLOCK_N = 128
BLOCK_K = 128
NUM_STAGES = 3
NUM_WARPS = 4
# What the problem computes (identified by the template's probe).
GROUP_K = 128
GROUP_N = 128


@triton.jit
def _find_tile(offsets_ptr, tile, num_experts, BLOCK_M: tl.constexpr):
    """(expert, first row, end row) of this row tile; expert -1 when the tiles run out."""
    expert = -1
    first_row = 0
    end_row = 0
    tiles_before = 0
    for e in range(0, num_experts):
        start = tl.load(offsets_ptr + e)
        end = tl.load(offsets_ptr + e + 1)
        tiles = tl.cdiv(end - start, BLOCK_M)
        mine = (tile >= tiles_before) & (tile < tiles_before + tiles)
        expert = tl.where(mine, e, expert)
        first_row = tl.where(mine, start + (tile - tiles_before) * BLOCK_M, first_row)
        end_row = tl.where(mine, end, end_row)
        tiles_before += tiles
    return expert, first_row, end_row


@triton.jit
def _moe_gemm(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, offsets_ptr, out_ptr, num_experts, N, K,
              x_stride, x_scale_stride, w_expert_stride, w_stride, w_scale_expert_stride,
              w_scale_stride, out_stride, GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    expert, first_row, end_row = _find_tile(offsets_ptr, tl.program_id(0), num_experts,
                                            BLOCK_M)
    if expert >= 0:
        rows = first_row + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        safe_rows = tl.where(rows < end_row, rows, first_row).to(tl.int64)
        safe_cols = tl.where(cols < N, cols, 0).to(tl.int64)
        k = tl.arange(0, BLOCK_K)
        w_base = w_ptr + expert.to(tl.int64) * w_expert_stride
        ws_base = w_scale_ptr + expert.to(tl.int64) * w_scale_expert_stride
        x_ptrs = x_ptr + safe_rows[:, None] * x_stride + k[None, :]
        w_ptrs = w_base + safe_cols[None, :] * w_stride + k[:, None]  # [BLOCK_K, BLOCK_N]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, K // BLOCK_K):
            group = step * BLOCK_K // GROUP_K
            x_scale = tl.load(x_scale_ptr + safe_rows * x_scale_stride + group)
            w_scale = tl.load(ws_base + safe_cols // GROUP_N * w_scale_stride + group)
            partial = tl.dot(tl.load(x_ptrs), tl.load(w_ptrs))
            acc += partial * x_scale[:, None] * w_scale[None, :]
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
                 mask=(rows < end_row)[:, None] & (cols < N)[None, :])


def moe_gemm(x, x_scale, weight, weight_scale, expert_offsets, out):
    rows, K = x.shape
    num_experts, N = weight.shape[0], weight.shape[1]
    grid = (triton.cdiv(rows, BLOCK_M) + num_experts, triton.cdiv(N, BLOCK_N))
    _moe_gemm[grid](x, x_scale, weight, weight_scale, expert_offsets, out, num_experts, N, K,
                    x.stride(0), x_scale.stride(0), weight.stride(0), weight.stride(1),
                    weight_scale.stride(0), weight_scale.stride(1), out.stride(0),
                    GROUP_K=GROUP_K, GROUP_N=GROUP_N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                    BLOCK_K=BLOCK_K, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
