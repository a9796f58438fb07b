"""Triton building blocks every HGEMM kernel here shares: the K loop of one output tile, its
masked store, and the sum of split-K partials.

C = A @ B with A [M, K] and B [K, N] given by strides, so one compiled kernel serves both B
layouts CUDA-L2 uses: "nn" (B row-major, stride (N, 1)) and "nt" (B the transpose of a row-major
[N, K] weight, stride (1, K)); Triton specialises a stride of 1, so each layout gets its own
contiguous loads. Accumulation is float32 (tl.dot on the tensor cores: wgmma for tiles of 64
rows or more on Hopper, mma below that), or float16 when ACC_FP16 (fp16 inputs only; the
tolerance that costs is in space.py). Tile order is the grouped order of solforge.tiling
(imported, not copied): GROUP_M row-tiles sweep one band of B columns, so the B tiles
they share stay in L2.

Triton 3.6's interpreter mis-computes tl.dot on bfloat16 operands (numpy has no bfloat16), so in
the interpreter (TRITON_INTERPRET=1, the CPU tests) the operands are widened to float32 (WIDEN):
bf16 products are exact in float32, only the order of the float32 sums differs. Compiled for a
GPU, WIDEN is off.
"""

import functools

import torch
import triton
import triton.language as tl


def widen(a: torch.Tensor) -> bool:
    """Whether the interpreter needs bf16 operands widened (see the module docstring)."""
    return bool(triton.knobs.runtime.interpret) and a.dtype == torch.bfloat16


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive integers, on the host. triton.cdiv is a constexpr function whose
    every call costs about 2 us of Python, and a launch here needed two to six of them."""
    return -(-a // b)


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device, asked once (persistent grids read it on
    every launch)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def even_k(k: int, block_k: int) -> bool:
    """K splits into whole BLOCK_K slices, so the K loop needs no mask."""
    return k % block_k == 0


@triton.jit
def accumulate(a_ptr, b_ptr, rows, cols, k_lo, k_hi, M, N, stride_am, stride_ak, stride_bk,
               stride_bn, EVEN_K: tl.constexpr, ACC_FP16: tl.constexpr, WIDEN: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """sum over k in [k_lo, k_hi) of A[rows, k] * B[k, cols], one BLOCK_K slice at a time.

    Rows and columns past the edge read row or column 0 (never stored), so only K needs a mask,
    and only when K is not a whole number of slices (EVEN_K off)."""
    ks = tl.arange(0, BLOCK_K)
    safe_rows = tl.where(rows < M, rows, 0).to(tl.int64)
    safe_cols = tl.where(cols < N, cols, 0).to(tl.int64)
    first_k = (k_lo + ks).to(tl.int64)
    a_ptrs = a_ptr + safe_rows[:, None] * stride_am + first_k[None, :] * stride_ak
    b_ptrs = b_ptr + first_k[:, None] * stride_bk + safe_cols[None, :] * stride_bn
    if ACC_FP16:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k + ks)[None, :] < k_hi, other=0.0)
            b = tl.load(b_ptrs, mask=(k + ks)[:, None] < k_hi, other=0.0)
        if WIDEN:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, out_dtype=acc.dtype)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def store_tile(c_ptr, acc, rows, cols, M, N, stride_cm, stride_cn):
    """Round the accumulators once to C's dtype and store the rows and columns inside C."""
    ptrs = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sum_splits(partials_ptr, c_ptr, M, N, splits, stride_cm, stride_cn, BLOCK: tl.constexpr):
    """C = the sum of `splits` float32 partial products stored [splits, M, N], rounded once.

    Bytes: reads splits * M * N * 4, writes M * N * 2."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < M * N
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(0, splits):
        total += tl.load(partials_ptr + split * M * N + offsets, mask=inside, other=0.0)
    rows, cols = offsets // N, offsets % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, total.to(c_ptr.dtype.element_ty),
             mask=inside)


SUM_BLOCK = 1024  # elements per program of the split sum: 4 KiB of each partial


def sum_splits(partials: torch.Tensor, out: torch.Tensor) -> None:
    """out = partials.sum(0), rounded once to out's dtype (one launch)."""
    splits, m, n = partials.shape
    grid = (ceil_div(m * n, SUM_BLOCK),)
    _sum_splits[grid](partials, out, m, n, splits, out.stride(0), out.stride(1),
                      BLOCK=SUM_BLOCK, num_warps=4)
