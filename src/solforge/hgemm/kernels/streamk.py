"""Stream-K HGEMM: a persistent grid shares out the MAC-loop iterations, not the tiles.

The work is tiles x k_tiles iterations (one BLOCK_K slice of one tile each), numbered tile by
tile; program p takes the contiguous range [p * share, (p + 1) * share). So every SM gets the
same work whatever the tile count: no partly idle last wave (the quantization that costs a
plain tiled kernel up to half a wave when tiles are a little over a multiple of the SM count).
A tile whose iterations one program covers whole is stored directly. A program's range can
begin and end inside tiles, so it holds at most two partial tiles: the partial of its first
tile goes to workspace slot 0, the partial of its last to slot 1 ([programs, 2, BLOCK_M,
BLOCK_N] float32). A second launch, one program per tile, sums the partials of the tiles that
were split (from the same arithmetic: which programs covered the tile, and which slot each
used) and rounds once. Deterministic: no atomics, no locks, no waiting on other programs.
"""

import torch
import triton
import triton.language as tl

from solforge.hgemm.kernels.blocks import (
    accumulate,
    ceil_div,
    even_k,
    store_tile,
    widen,
)
from solforge.hgemm.kernels.tiled import persistent_programs
from solforge.tiling import tile_coordinates


# `share` depends on the SM count: left unspecialised, so a kernel compiled ahead of time on a
# machine without the GPU (precompile.py) is the one the GPU looks up.
@triton.jit(do_not_specialize=["share"])
def _stream(a_ptr, b_ptr, c_ptr, partials_ptr, M, N, K, share, stride_am, stride_ak, stride_bk,
            stride_bn, stride_cm, stride_cn, EVEN_K: tl.constexpr, ACC_FP16: tl.constexpr,
            WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    program = tl.program_id(0)
    step = program * share
    end = tl.minimum(step + share, num_m * num_n * k_tiles)
    first_tile = step // k_tiles
    slots = partials_ptr + program * 2 * BLOCK_M * BLOCK_N
    inside = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    while step < end:
        tile = step // k_tiles
        k_first = step - tile * k_tiles
        k_last = tl.minimum(k_tiles, k_first + end - step)
        pid_m, pid_n = tile_coordinates(tile, num_m, num_n, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = accumulate(a_ptr, b_ptr, rows, cols, k_first * BLOCK_K,
                         tl.minimum(K, k_last * BLOCK_K), M, N, stride_am, stride_ak, stride_bk,
                         stride_bn, EVEN_K, ACC_FP16, WIDEN, BLOCK_M, BLOCK_N, BLOCK_K)
        if k_first == 0 and k_last == k_tiles:
            store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn)
        else:
            slot = tl.where(tile == first_tile, 0, 1)
            tl.store(slots + slot * BLOCK_M * BLOCK_N + inside, acc.to(tl.float32))
        step += k_last - k_first


@triton.jit(do_not_specialize=["share"])
def _fix_split_tiles(c_ptr, partials_ptr, M, N, K, share, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile = tl.program_id(0)
    first_program = (tile * k_tiles) // share
    last_program = ((tile + 1) * k_tiles - 1) // share
    if first_program != last_program:  # else one program covered the tile and stored it
        inside = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for program in range(first_program, last_program + 1):
            slot = tl.where((program * share) // k_tiles == tile, 0, 1)
            total += tl.load(partials_ptr + (program * 2 + slot) * BLOCK_M * BLOCK_N + inside)
        pid_m, pid_n = tile_coordinates(tile, num_m, num_n, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        store_tile(c_ptr, total, rows, cols, M, N, stride_cm, stride_cn)


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk, gm = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"], params["GROUP_M"]
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    iterations = tiles * ceil_div(k, bk)
    programs = min(persistent_programs(iterations, a.device), iterations)
    share = ceil_div(iterations, programs)
    partials = torch.empty((programs, 2, bm, bn), dtype=torch.float32, device=a.device)
    _stream[(programs,)](a, b, out, partials, m, n, k, share, a.stride(0), a.stride(1),
                         b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                         EVEN_K=even_k(k, bk), ACC_FP16=bool(params["ACC_FP16"]), WIDEN=widen(a),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm,
                         num_stages=params["NUM_STAGES"], num_warps=params["NUM_WARPS"])
    _fix_split_tiles[(tiles,)](out, partials, m, n, k, share, out.stride(0), out.stride(1),
                               BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_warps=4)
