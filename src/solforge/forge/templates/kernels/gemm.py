"""out = epilogue(x @ weight^T): a tiled GEMM with grouped tile order and a fused epilogue.

x is [M, K], weight [N, K] (nn.Linear's layout), out [M, N]. Each tile of BLOCK_M x BLOCK_N
outputs accumulates BLOCK_K-wide slices of x and weight with tl.dot in float32 (on Hopper,
wgmma for tiles of 64 rows or more, operands staged in shared memory NUM_STAGES deep). Tiles
are taken in groups of GROUP_M row-tiles that sweep the same band of weight columns, so
consecutive programs find the weight tiles in L2. The epilogue adds the bias, applies the
activation (after rounding the pre-activation to the output dtype where the reference does)
and rounds once to the output dtype.

PERSISTENT launches one program per SM, each looping over tiles (tile, tile + programs, ...),
instead of one program per tile: less launch and tail cost when tiles are many and small.
K must be a multiple of BLOCK_K (no masks in the main loop). Rows and columns past the edge of
a tile read row or column 0 and are never stored.

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
BLOCK_M = 64
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_STAGES = 3
NUM_WARPS = 4
PERSISTENT = False
# What the problem computes (identified by the template's probe).
HAS_BIAS = False
ACTIVATION = "none"
ROUND_BEFORE_ACTIVATION = False

# Persistent programs on the CPU (Triton's interpreter): few, so each loops over several tiles,
# as on a GPU with more tiles than SMs.
CPU_PROGRAMS = 3
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
def _epilogue(acc, bias_ptr, cols, col_mask, out_dtype, HAS_BIAS: tl.constexpr,
              ACTIVATION: tl.constexpr, ROUND_BEFORE_ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
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
def _gemm_tile(tile, x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, x_stride, w_stride, out_stride,
               HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
               ROUND_BEFORE_ACTIVATION: tl.constexpr, WIDEN: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coordinates(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + tl.where(rows < M, rows, 0).to(tl.int64)[:, None] * x_stride + k[None, :]
    w_ptrs = w_ptr + tl.where(cols < N, cols, 0).to(tl.int64)[None, :] * w_stride + k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K // BLOCK_K):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs)  # [BLOCK_K, BLOCK_N]: a tile of weight^T
        if WIDEN:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    out = _epilogue(acc, bias_ptr, cols, cols < N, out_ptr.dtype.element_ty, HAS_BIAS,
                    ACTIVATION, ROUND_BEFORE_ACTIVATION)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out_ptrs, out, mask=(rows < M)[:, None] & (cols < N)[None, :])


@triton.jit
def _gemm(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, x_stride, w_stride, out_stride,
          HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
          ROUND_BEFORE_ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, PERSISTENT: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          GROUP_M: tl.constexpr):
    if PERSISTENT:
        num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            _gemm_tile(tile, x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, x_stride, w_stride,
                       out_stride, HAS_BIAS, ACTIVATION, ROUND_BEFORE_ACTIVATION, WIDEN,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    else:
        _gemm_tile(tl.program_id(0), x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, x_stride,
                   w_stride, out_stride, HAS_BIAS, ACTIVATION, ROUND_BEFORE_ACTIVATION, WIDEN,
                   BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


def _programs(tiles, device):
    """One program per tile, or (PERSISTENT) at most one per SM."""
    if not PERSISTENT:
        return tiles
    if device.type == "cuda":
        return min(tiles, torch.cuda.get_device_properties(device).multi_processor_count)
    return min(tiles, CPU_PROGRAMS)


def gemm(x, weight, out, bias=None):
    M, K = x.shape
    N = weight.shape[0]
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    widen = triton.knobs.runtime.interpret and x.dtype == torch.bfloat16
    _gemm[(_programs(tiles, x.device),)](
        x, weight, bias, out, M, N, K, x.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION, ROUND_BEFORE_ACTIVATION=ROUND_BEFORE_ACTIVATION,
        WIDEN=widen, PERSISTENT=PERSISTENT, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP_M=GROUP_M, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
