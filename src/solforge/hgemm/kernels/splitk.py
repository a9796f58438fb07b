"""Split-K HGEMM: when the output has too few tiles to fill the GPU (small M x N, long K), each
tile's K range is cut into SPLIT_K slices computed by separate programs.

Program (tile, split) writes its float32 partial product into a [SPLIT_K, M, N] workspace; a
second launch sums the partials and rounds once to C's dtype (blocks.sum_splits): deterministic,
no atomics, no zeroing. Extra bytes: SPLIT_K * M * N * 4 written and read back, small exactly
where split-K pays (M * N small). Also the decode path's tensor-core variant: BLOCK_M = 16 rows
of tl.dot covers M up to 16 with the K loop spread over SMs (gemv.py is the CUDA-core one).
"""

import torch
import triton
import triton.language as tl

from solforge.hgemm.kernels.blocks import (
    accumulate,
    ceil_div,
    even_k,
    store_tile,
    sum_splits,
    widen,
)
from solforge.tiling import tile_coordinates


@triton.jit
def _partials(a_ptr, b_ptr, partials_ptr, M, N, K, k_per_split, stride_am, stride_ak,
              stride_bk, stride_bn, EVEN_K: tl.constexpr, ACC_FP16: tl.constexpr,
              WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    split = tl.program_id(1)
    pid_m, pid_n = tile_coordinates(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N),
                                    GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = split * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    acc = accumulate(a_ptr, b_ptr, rows, cols, k_lo, k_hi, M, N, stride_am, stride_ak, stride_bk,
                     stride_bn, EVEN_K, ACC_FP16, WIDEN, BLOCK_M, BLOCK_N, BLOCK_K)
    store_tile(partials_ptr + split * M * N, acc.to(tl.float32), rows, cols, M, N, N, 1)


def k_per_split(k: int, block_k: int, splits: int) -> int:
    """Each split's share of K, a whole number of BLOCK_K slices (the last split may be short)."""
    return ceil_div(ceil_div(k, block_k), splits) * block_k


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk, splits = (params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"],
                          params["SPLIT_K"])
    share = k_per_split(k, bk, splits)
    splits = ceil_div(k, share)  # no empty split when K is short
    partials = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
    grid = (ceil_div(m, bm) * ceil_div(n, bn), splits)
    _partials[grid](a, b, partials, m, n, k, share, a.stride(0), a.stride(1), b.stride(0),
                    b.stride(1), EVEN_K=even_k(k, bk), ACC_FP16=bool(params["ACC_FP16"]),
                    WIDEN=widen(a), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=params["GROUP_M"],
                    num_stages=params["NUM_STAGES"], num_warps=params["NUM_WARPS"])
    sum_splits(partials, out)
