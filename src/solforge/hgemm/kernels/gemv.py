"""GEMV-style HGEMM for decode (M of 1 to 8 rows): CUDA-core FMAs, split over N and K, shaped
to stream B at the speed of HBM.

At M <= 8 the product is bound by reading B (2 * K * N bytes; A and C are tiny): at M = 1 it is
2 * K * N FLOPs over 2 * K * N bytes, about 1 FLOP per byte against the H200's ridge of about
206 FLOP/byte, so the floor is 2 * K * N / 4.8e12 s and the kernel is built for bandwidth:
- wide loads: B is read along its contiguous axis, K for a "nt" B (an nn.Linear weight, rows
  of K), N for a "nn" B, so each thread loads 16 bytes (8 halves) at a time; rows and columns
  past the edge are clamped to row 0 (never stored) instead of masked, and K is masked only
  when it is not a whole number of BLOCK_K slices (EVEN_K off), so nothing breaks the vectors;
- many rows a program, bytes in flight: a program owns BLOCK_N outputs (rows of the weight) and
  reads a BLOCK_N x BLOCK_K slice of B per step (up to 32 KB), multiplying it with all BLOCK_M
  rows of A (the next power of two >= M) held in registers, summing over K in float32;
- parallelism: programs cover N in BLOCK_N columns and K in SPLIT_K slices, so N = 4096 still
  gives every SM several programs; with SPLIT_K > 1 the float32 partials are summed by a
  second launch (blocks.sum_splits), as in split-K.
"""

import torch
import triton
import triton.language as tl

from solforge.hgemm.kernels.blocks import ceil_div, even_k, sum_splits
from solforge.hgemm.kernels.splitk import k_per_split
from solforge.hgemm.space import layout_of


@triton.jit
def _gemv(a_ptr, b_ptr, dst_ptr, M, N, K, k_per_split, split_stride, stride_am, stride_ak,
          stride_bk, stride_bn, stride_dm, stride_dn, B_KMAJOR: tl.constexpr,
          EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr):
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_rows = tl.where(rows < M, rows, 0)
    safe_cols = tl.where(cols < N, cols, 0).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    k_lo = split * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        kk = k + ks
        a_ptrs = a_ptr + safe_rows[:, None] * stride_am + kk[None, :] * stride_ak
        if B_KMAJOR:  # [BLOCK_N, BLOCK_K] tiles, K contiguous
            b_ptrs = b_ptr + safe_cols[:, None] * stride_bn + kk.to(tl.int64)[None, :] * stride_bk
        else:  # [BLOCK_K, BLOCK_N] tiles, N contiguous
            b_ptrs = b_ptr + kk.to(tl.int64)[:, None] * stride_bk + safe_cols[None, :] * stride_bn
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(kk < k_hi)[None, :], other=0.0)
            if B_KMAJOR:
                b = tl.load(b_ptrs, mask=(kk < k_hi)[None, :], other=0.0)
            else:
                b = tl.load(b_ptrs, mask=(kk < k_hi)[:, None], other=0.0)
        if B_KMAJOR:
            acc += tl.sum(a.to(tl.float32)[:, None, :] * b.to(tl.float32)[None, :, :], axis=2)
        else:
            acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    dst = dst_ptr + split * split_stride
    ptrs = dst + rows[:, None] * stride_dm + cols[None, :] * stride_dn
    tl.store(ptrs, acc.to(dst_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    bn, bk = params["BLOCK_N"], params["BLOCK_K"]
    share = k_per_split(k, bk, params["SPLIT_K"])
    splits = ceil_div(k, share)
    if splits == 1:
        dst, split_stride = out, 0
    else:
        dst = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
        split_stride = m * n
    grid = (ceil_div(n, bn), splits)
    _gemv[grid](a, b, dst, m, n, k, share, split_stride, a.stride(0), a.stride(1), b.stride(0),
                b.stride(1), dst.stride(-2), dst.stride(-1), B_KMAJOR=layout_of(b) == "nt",
                EVEN_K=even_k(k, bk), BLOCK_M=params["BLOCK_M"], BLOCK_N=bn, BLOCK_K=bk,
                num_stages=params["NUM_STAGES"], num_warps=params["NUM_WARPS"])
    if splits > 1:
        sum_splits(dst, out)
