"""out = epilogue(x @ weight^T) with K split over programs, for outputs too small to fill the GPU.

x is [M, K], weight [N, K] (nn.Linear's layout), out [M, N]. When the output has fewer
BLOCK_M x BLOCK_N tiles than the GPU has SMs (a decode batch against a long K: M = 16, N = 128,
K = 28672 is one tile), one program per tile leaves SMs idle while it walks all of K. Here
program (tile, split) accumulates only its share of K, in float32 (tl.dot: wgmma for tiles of 64
rows or more on Hopper, operands staged in shared memory NUM_STAGES deep), and stores the partial
product in a [SPLIT_K, M, N] float32 workspace; a second launch sums each output's SPLIT_K
partials in split order (deterministic: no atomics, and no zeroing, since every partial is
written), adds the bias, applies the activation (after rounding the pre-activation to the output
dtype where the reference does) and rounds once to the output dtype.

The split's price is the workspace, SPLIT_K * M * N * 4 bytes written and read back, against
(M + N) * K * 2 bytes of operands: at M = 16, N = 128, K = 28672, SPLIT_K = 32, 256 KiB each
way against 7.9 MiB (3 %).

When the tiles already fill the SMs (the prefill workloads of the same problem) a split adds no
parallelism and its workspace would be gigabytes (16 x 16384 x 57344 x 4 bytes at SPLIT_K = 16),
so the launcher runs a single split whose programs apply the epilogue and store out directly:
the tiled GEMM, tiles in grouped order (GROUP_M row-tiles per band of weight columns, for L2).

K must be a multiple of BLOCK_K (no mask in the K loop). Its K / BLOCK_K steps are dealt out in
whole steps, split s taking steps [s * steps // SPLIT_K, (s + 1) * steps // SPLIT_K): shares
differ by at most one step and none is empty when steps >= SPLIT_K, so K / SPLIT_K need not be
a multiple of BLOCK_K. Rows and columns past the edge of a tile read row or column 0 and are
never stored.

Triton 3.6's interpreter mis-computes tl.dot on bfloat16 operands (numpy has no bfloat16),
so when the kernel runs in the interpreter (TRITON_INTERPRET=1, on the CPU) the operands are
widened to float32 first: bf16 products are exact in float32, only the order of the float32
sums differs. Compiled for a GPU, WIDEN is off and the kernel is unchanged.
"""

import math

import torch
import triton
import triton.language as tl

# Template parameters (rewritten by render).
BLOCK_M = 16
BLOCK_N = 128
BLOCK_K = 64
SPLIT_K = 8
NUM_STAGES = 3
NUM_WARPS = 4
# What the problem computes (identified by the template's probe).
HAS_BIAS = False
ACTIVATION = "none"
ROUND_BEFORE_ACTIVATION = False

GROUP_M = 8  # row-tiles per band of weight columns when the tiles fill the GPU (one split)
SUM_BLOCK = 1024  # outputs per program of the split sum: 4 KiB of each partial
# SMs assumed on the CPU (Triton's interpreter): the H200's, so a CPU run splits where it would.
CPU_SM_COUNT = 132
INV_SQRT_2 = tl.constexpr(1 / math.sqrt(2))
SQRT_2_OVER_PI = tl.constexpr(math.sqrt(2 / math.pi))


@triton.jit
def _tile_coordinates(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M consecutive row-tiles per band of column tiles."""
    tiles_per_group = GROUP_M * num_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    within = tile % tiles_per_group
    return first_m + within % group_rows, within // group_rows


@triton.jit
def _epilogue(acc, bias_ptr, cols, inside, out_dtype, HAS_BIAS: tl.constexpr,
              ACTIVATION: tl.constexpr, ROUND_BEFORE_ACTIVATION: tl.constexpr):
    """Bias, activation, one rounding; `cols` and `inside` broadcast against `acc`."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    if ACTIVATION != "none":
        if ROUND_BEFORE_ACTIVATION:
            acc = acc.to(out_dtype).to(tl.float32)
        if ACTIVATION == "silu":
            acc = acc / (1.0 + tl.exp(-acc))
        elif ACTIVATION == "gelu_tanh":
            acc = acc / (1.0 + tl.exp(-2.0 * SQRT_2_OVER_PI * (acc + 0.044715 * acc * acc * acc)))
        else:  # gelu_erf
            acc = 0.5 * acc * (1.0 + tl.math.erf(acc * INV_SQRT_2))
    return acc.to(out_dtype)


@triton.jit
def _partials(x_ptr, w_ptr, bias_ptr, dst_ptr, M, N, K, x_stride, w_stride, dst_stride,
              dst_plane, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
              ROUND_BEFORE_ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, SPLITS: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr):
    """Program (tile, split): the tile's product over the split's K steps. With SPLITS > 1 the
    float32 partial goes to plane `split` of the workspace; with one split the epilogue runs
    here and dst is out."""
    split = tl.program_id(1)
    pid_m, pid_n = _tile_coordinates(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N),
                                     GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    steps = K // BLOCK_K
    first = split * steps // SPLITS
    last = (split + 1) * steps // SPLITS
    k = first * BLOCK_K + tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + tl.where(rows < M, rows, 0).to(tl.int64)[:, None] * x_stride + k[None, :]
    w_ptrs = w_ptr + tl.where(cols < N, cols, 0).to(tl.int64)[None, :] * w_stride + k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(first, last):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs)  # [BLOCK_K, BLOCK_N]: a tile of weight^T
        if WIDEN:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    inside = (rows < M)[:, None] & (cols < N)[None, :]
    dst_ptrs = (dst_ptr + split.to(tl.int64) * dst_plane +
                rows.to(tl.int64)[:, None] * dst_stride + cols[None, :])
    if SPLITS == 1:
        acc = _epilogue(acc, bias_ptr, cols[None, :], (cols < N)[None, :],
                        dst_ptr.dtype.element_ty, HAS_BIAS, ACTIVATION, ROUND_BEFORE_ACTIVATION)
    tl.store(dst_ptrs, acc, mask=inside)


@triton.jit
def _sum_splits(partials_ptr, bias_ptr, out_ptr, N, out_stride, plane, HAS_BIAS: tl.constexpr,
                ACTIVATION: tl.constexpr, ROUND_BEFORE_ACTIVATION: tl.constexpr,
                SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """out = epilogue(sum of the SPLITS partials, in split order), over `plane` = M * N outputs.

    Bytes: reads SPLITS * M * N * 4, writes M * N * element size."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < plane
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(0, SPLITS):
        total += tl.load(partials_ptr + split * plane + offsets, mask=inside, other=0.0)
    rows, cols = offsets // N, offsets % N
    out = _epilogue(total, bias_ptr, cols, inside, out_ptr.dtype.element_ty, HAS_BIAS, ACTIVATION,
                    ROUND_BEFORE_ACTIVATION)
    tl.store(out_ptr + rows * out_stride + cols, out, mask=inside)


def _sm_count(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_SM_COUNT


def gemm(x, weight, out, bias=None):
    M, K = x.shape
    N = weight.shape[0]
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    splits = SPLIT_K if tiles < _sm_count(x.device) else 1  # split only where SMs would idle
    widen = triton.knobs.runtime.interpret and x.dtype == torch.bfloat16
    if splits == 1:
        dst, dst_stride, dst_plane = out, out.stride(0), 0
    else:
        dst = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        dst_stride, dst_plane = N, M * N
    _partials[(tiles, splits)](
        x, weight, bias, dst, M, N, K, x.stride(0), weight.stride(0), dst_stride, dst_plane,
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION, ROUND_BEFORE_ACTIVATION=ROUND_BEFORE_ACTIVATION,
        WIDEN=widen, SPLITS=splits, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP_M=GROUP_M, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
    if splits > 1:
        _sum_splits[(triton.cdiv(M * N, SUM_BLOCK),)](
            dst, bias, out, N, out.stride(0), M * N, HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
            ROUND_BEFORE_ACTIVATION=ROUND_BEFORE_ACTIVATION, SPLITS=splits, BLOCK=SUM_BLOCK,
            num_warps=4)
