"""TMA HGEMM: Hopper's tensor memory accelerator moves whole operand and output tiles.

The host describes A, B and C once (triton.tools.tensor_descriptor.TensorDescriptor: base,
shape, strides, tile shape); the kernel asks for tiles by coordinates, which compiles to
cp.async.bulk.tensor copies into shared memory completing on an mbarrier (NUM_STAGES deep)
instead of per-thread loads, and stores C the same way. The copy engine clips at the matrix
edges (zero fill on loads, nothing written past the edge on stores): no masks, any M, N, K. It
needs 16-byte-aligned row strides (space.py checks: K and N multiples of 8) and a row-major A.
B is described in its own storage order: "nn" B as [K, N] tiles of BLOCK_K x BLOCK_N; "nt" B
through its row-major [N, K] storage, tiles of BLOCK_N x BLOCK_K used transposed (wgmma reads
either major-ness from shared memory). PERSISTENT: one program per SM looping over tiles in
grouped order, as in tiled.py.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from solforge.hgemm.kernels.blocks import ceil_div, widen
from solforge.hgemm.kernels.tiled import persistent_programs
from solforge.hgemm.space import layout_of
from solforge.tiling import tile_coordinates


@triton.jit
def _tma_tile(tile, a_desc, b_desc, c_desc, M, N, K, B_KMAJOR: tl.constexpr,
              ACC_FP16: tl.constexpr, WIDEN: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_coordinates(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    row, col = pid_m * BLOCK_M, pid_n * BLOCK_N
    if ACC_FP16:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([row, k])
        # a "nt" B is stored [BLOCK_N, BLOCK_K]: used transposed
        b = b_desc.load([col, k]).T if B_KMAJOR else b_desc.load([k, col])
        if WIDEN:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, out_dtype=acc.dtype)
    c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def _tma(a_desc, b_desc, c_desc, M, N, K, PERSISTENT: tl.constexpr, B_KMAJOR: tl.constexpr,
         ACC_FP16: tl.constexpr, WIDEN: tl.constexpr, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    if PERSISTENT:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            _tma_tile(tile, a_desc, b_desc, c_desc, M, N, K, B_KMAJOR, ACC_FP16, WIDEN,
                      BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    else:
        _tma_tile(tl.program_id(0), a_desc, b_desc, c_desc, M, N, K, B_KMAJOR, ACC_FP16, WIDEN,
                  BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    k_major = layout_of(b) == "nt"
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b.T if k_major else b, [bn, bk] if k_major else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    persistent = bool(params["PERSISTENT"])
    grid = (persistent_programs(tiles, a.device) if persistent else tiles,)
    _tma[grid](a_desc, b_desc, c_desc, m, n, k, PERSISTENT=persistent, B_KMAJOR=k_major,
               ACC_FP16=bool(params["ACC_FP16"]), WIDEN=widen(a), BLOCK_M=bm, BLOCK_N=bn,
               BLOCK_K=bk, GROUP_M=params["GROUP_M"], num_stages=params["NUM_STAGES"],
               num_warps=params["NUM_WARPS"])
