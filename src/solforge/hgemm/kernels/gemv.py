"""GEMV-style HGEMM for decode (M of 1 to 8 rows): CUDA-core FMAs, split over N and K.

At M <= 8 the product is bound by reading B (2 * K * N bytes; A and C are tiny), so the kernel
is shaped for bandwidth, not for tensor cores: each program reads a BLOCK_K x BLOCK_N slice of
B once and multiplies it with all BLOCK_M (the next power of two >= M) rows of A in registers,
summing over K in float32. Programs cover N in BLOCK_N columns and K in SPLIT_K slices, so even
N = 4096 gives enough programs to keep every SM's loads in flight; with SPLIT_K > 1 the float32
partials are summed by a second launch (blocks.sum_splits), as in split-K. At M = 1 this is
2 * K * N FLOPs over 2 * K * N bytes: about 1 FLOP per byte, far below the ~206 FLOP/byte
ridge of the H200, so the bandwidth floor is 2 * K * N / 4.8e12 s.
"""

import torch
import triton
import triton.language as tl

from solforge.hgemm.kernels.blocks import sum_splits
from solforge.hgemm.kernels.splitk import k_per_split


@triton.jit
def _gemv(a_ptr, b_ptr, dst_ptr, M, N, K, k_per_split, split_stride, stride_am, stride_ak,
          stride_bk, stride_bn, stride_dm, stride_dn, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    k_lo = split * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        k_inside = (k + ks) < k_hi
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows < M)[:, None] & k_inside[None, :], other=0.0)
        b = tl.load(b_ptr + (k + ks).to(tl.int64)[:, None] * stride_bk
                    + cols.to(tl.int64)[None, :] * stride_bn,
                    mask=k_inside[:, None] & (cols < N)[None, :], other=0.0)
        acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    dst = dst_ptr + split * split_stride
    ptrs = dst + rows[:, None] * stride_dm + cols[None, :] * stride_dn
    tl.store(ptrs, acc.to(dst_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    bn, bk = params["BLOCK_N"], params["BLOCK_K"]
    share = k_per_split(k, bk, params["SPLIT_K"])
    splits = triton.cdiv(k, share)
    if splits == 1:
        dst, split_stride = out, 0
    else:
        dst = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
        split_stride = m * n
    grid = (triton.cdiv(n, bn), splits)
    _gemv[grid](a, b, dst, m, n, k, share, split_stride, a.stride(0), a.stride(1), b.stride(0),
                b.stride(1), dst.stride(-2), dst.stride(-1), BLOCK_M=params["BLOCK_M"],
                BLOCK_N=bn, BLOCK_K=bk, num_stages=params["NUM_STAGES"],
                num_warps=params["NUM_WARPS"])
    if splits > 1:
        sum_splits(dst, out)
