"""out = (x @ weight^T) with dequantisation scales, for FP8 (e4m3) or int8 operands.

x is [M, K], weight [N, K], out [M, N] in bfloat16. The operands go to the tensor cores as they
are (FP8 wgmma / int8 mma on Hopper: twice the bf16 rate, half the bytes) and the scales are
applied to the float32 (int32 for int8) products, which is exact algebra:
sum_k (x_k s_x)(w_k s_w) = s_x s_w sum_k x_k w_k whenever the scales are constant along the
summed range. SCALING says where they are constant:
- "tensor": one scale each for x and weight, applied once after the K loop;
- "row": one per row of x (token) and per row of weight (output channel), after the loop;
- "block": one per GROUP_K-wide group of K for each row of x, and one per GROUP_N x GROUP_K tile
  of weight (DeepSeek-V3's 1x128 / 128x128 blocks): each BLOCK_K slice (which lies in one
  group) is scaled as it is accumulated.
Tiles in grouped order (GROUP_M row-tiles per band of weight columns) for L2 reuse; K must be a
multiple of BLOCK_K (no mask in the loop); rows and columns past the edge read row or column 0
and are never stored.
"""

import torch
import triton
import triton.language as tl

# Template parameters (rewritten by render).
BLOCK_M = 64
BLOCK_N = 128
BLOCK_K = 128
GROUP_M = 8
NUM_STAGES = 3
NUM_WARPS = 4
# What the problem computes (identified by the template's probe).
SCALING = "row"
GROUP_K = 128
GROUP_N = 128


@triton.jit
def _tile_coordinates(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M consecutive row-tiles per band of column tiles."""
    tiles_per_group = GROUP_M * num_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    within = tile % tiles_per_group
    return first_m + within % group_rows, within // group_rows


@triton.jit
def _gemm_scaled(x_ptr, w_ptr, x_scale_ptr, w_scale_ptr, out_ptr, M, N, K, x_stride, w_stride,
                 out_stride, x_scale_stride, w_scale_stride, INT8: tl.constexpr,
                 SCALING: tl.constexpr, GROUP_K: tl.constexpr, GROUP_N: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coordinates(tl.program_id(0), tl.cdiv(M, BLOCK_M),
                                     tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.where(rows < M, rows, 0).to(tl.int64)
    safe_cols = tl.where(cols < N, cols, 0).to(tl.int64)
    k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + safe_rows[:, None] * x_stride + k[None, :]
    w_ptrs = w_ptr + safe_cols[None, :] * w_stride + k[:, None]  # [BLOCK_K, BLOCK_N]
    if INT8:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)  # exact integer sums
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, K // BLOCK_K):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs)
        if SCALING == "block":
            group = step * BLOCK_K // GROUP_K
            x_scale = tl.load(x_scale_ptr + safe_rows * x_scale_stride + group)
            w_scale = tl.load(w_scale_ptr + safe_cols // GROUP_N * w_scale_stride + group)
            acc += tl.dot(a, b) * x_scale[:, None] * w_scale[None, :]
        elif INT8:
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        else:
            acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    result = acc.to(tl.float32)
    if SCALING == "row":
        result = result * tl.load(x_scale_ptr + safe_rows)[:, None]
        result = result * tl.load(w_scale_ptr + safe_cols)[None, :]
    elif SCALING == "tensor":
        result = result * tl.load(x_scale_ptr) * tl.load(w_scale_ptr)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out_ptrs, result.to(out_ptr.dtype.element_ty),
             mask=(rows < M)[:, None] & (cols < N)[None, :])


def gemm_scaled(x, weight, x_scale, weight_scale, out):
    M, K = x.shape
    N = weight.shape[0]
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    x_scale_stride = x_scale.stride(0) if x_scale.dim() == 2 else 0
    w_scale_stride = weight_scale.stride(0) if weight_scale.dim() == 2 else 0
    _gemm_scaled[grid](x, weight, x_scale, weight_scale, out, M, N, K, x.stride(0),
                       weight.stride(0), out.stride(0), x_scale_stride, w_scale_stride,
                       INT8=x.dtype == torch.int8, SCALING=SCALING, GROUP_K=GROUP_K,
                       GROUP_N=GROUP_N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                       GROUP_M=GROUP_M,
                       num_stages=NUM_STAGES, num_warps=NUM_WARPS)
