"""Tiled HGEMM: one BLOCK_M x BLOCK_N output tile per program in grouped order, or (PERSISTENT)
one program per SM looping over the tiles (tile, tile + programs, ...).

The general-purpose kernel of the family: any strides for A and B (so both B layouts), any M, N
and K (K masked when it is not a whole number of BLOCK_K slices). Operand tiles are loaded by
the threads and staged in shared memory NUM_STAGES deep by Triton's pipeliner (cp.async on
Hopper); TMA moves them in tma.py. Persistent programs save launch and tail cost when the tiles
are many and small. FLOPs: 2 * M * N * K; bytes at best: A, B and C once.
"""

import torch
import triton
import triton.language as tl

from solforge.hgemm.kernels.blocks import (
    accumulate,
    ceil_div,
    even_k,
    sm_count,
    store_tile,
    widen,
)
from solforge.tiling import tile_coordinates

CPU_PROGRAMS = 3  # persistent programs in the interpreter: few, so each loops over several tiles


@triton.jit
def _tile(tile, a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
          stride_cm, stride_cn, EVEN_K: tl.constexpr, ACC_FP16: tl.constexpr,
          WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_coordinates(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = accumulate(a_ptr, b_ptr, rows, cols, 0, K, M, N, stride_am, stride_ak, stride_bk,
                     stride_bn, EVEN_K, ACC_FP16, WIDEN, BLOCK_M, BLOCK_N, BLOCK_K)
    store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn)


@triton.jit
def _tiled(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
           stride_cm, stride_cn, PERSISTENT: tl.constexpr, EVEN_K: tl.constexpr,
           ACC_FP16: tl.constexpr, WIDEN: tl.constexpr, BLOCK_M: tl.constexpr,
           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    if PERSISTENT:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            _tile(tile, a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, EVEN_K, ACC_FP16, WIDEN, BLOCK_M, BLOCK_N, BLOCK_K,
                  GROUP_M)
    else:
        _tile(tl.program_id(0), a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, stride_cm, stride_cn, EVEN_K, ACC_FP16, WIDEN, BLOCK_M, BLOCK_N,
              BLOCK_K, GROUP_M)


def persistent_programs(tiles: int, device: torch.device) -> int:
    """One program per SM (at most one per tile); a few in the interpreter."""
    if device.type == "cuda":
        return min(tiles, sm_count(device))
    return min(tiles, CPU_PROGRAMS)


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    tiles = ceil_div(m, params["BLOCK_M"]) * ceil_div(n, params["BLOCK_N"])
    persistent = bool(params["PERSISTENT"])
    grid = (persistent_programs(tiles, a.device) if persistent else tiles,)
    _tiled[grid](a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 out.stride(0), out.stride(1), PERSISTENT=persistent,
                 EVEN_K=even_k(k, params["BLOCK_K"]), ACC_FP16=bool(params["ACC_FP16"]),
                 WIDEN=widen(a), BLOCK_M=params["BLOCK_M"], BLOCK_N=params["BLOCK_N"],
                 BLOCK_K=params["BLOCK_K"], GROUP_M=params["GROUP_M"],
                 num_stages=params["NUM_STAGES"], num_warps=params["NUM_WARPS"])
