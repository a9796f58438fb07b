"""out = epilogue(x @ weight^T) with Hopper's tensor memory accelerator (TMA) moving the tiles.

x is [M, K], weight [N, K], out [M, N]. The host describes each matrix once (a
triton.tools.tensor_descriptor.TensorDescriptor: base, shape, strides, tile shape); the kernel
asks for whole tiles by coordinates, which compiles to cp.async.bulk.tensor copies into shared
memory completing on an mbarrier (NUM_STAGES deep) instead of per-thread loads, and stores the
result tile the same way. The copy engine clips at the matrix edges (zero fill on loads, no
write past the edge on stores), so no masks and no divisibility of M, N or K; TMA needs
16-byte-aligned row strides (K and N multiples of 8 for 2-byte elements). Tiles in grouped
order (GROUP_M row-tiles per band of weight columns) for L2 reuse; float32 accumulation; the
epilogue adds the bias, applies the activation and rounds once.

Triton 3.6's interpreter mis-computes tl.dot on bfloat16 operands (numpy has no bfloat16),
so when the kernel runs in the interpreter (TRITON_INTERPRET=1, on the CPU) the operands are
widened to float32 first: bf16 products are exact in float32, only the order of the float32
sums differs. Compiled for a GPU, WIDEN is off and the kernel is unchanged.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

# Template parameters (rewritten by render).
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_STAGES = 3
NUM_WARPS = 8
# What the problem computes (identified by the template's probe).
HAS_BIAS = False
ACTIVATION = "none"
ROUND_BEFORE_ACTIVATION = False

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
def _gemm_tma(x_desc, w_desc, out_desc, bias_ptr, M, N, K, HAS_BIAS: tl.constexpr,
              ACTIVATION: tl.constexpr, ROUND_BEFORE_ACTIVATION: tl.constexpr,
              WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coordinates(tl.program_id(0), tl.cdiv(M, BLOCK_M),
                                     tl.cdiv(N, BLOCK_N), GROUP_M)
    row, col = pid_m * BLOCK_M, pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = x_desc.load([row, k])
        b = w_desc.load([col, k])  # [BLOCK_N, BLOCK_K]
        if WIDEN:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b.T, acc)
    cols = col + tl.arange(0, BLOCK_N)
    out = _epilogue(acc, bias_ptr, cols, cols < N, out_desc.dtype, HAS_BIAS, ACTIVATION,
                    ROUND_BEFORE_ACTIVATION)
    out_desc.store([row, col], out)


def gemm(x, weight, out, bias=None):
    M, K = x.shape
    N = weight.shape[0]
    x_desc = TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_K])
    w_desc = TensorDescriptor.from_tensor(weight, [BLOCK_N, BLOCK_K])
    out_desc = TensorDescriptor.from_tensor(out, [BLOCK_M, BLOCK_N])
    widen = triton.knobs.runtime.interpret and x.dtype == torch.bfloat16
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _gemm_tma[grid](x_desc, w_desc, out_desc, bias, M, N, K, HAS_BIAS=HAS_BIAS,
                    ACTIVATION=ACTIVATION, ROUND_BEFORE_ACTIVATION=ROUND_BEFORE_ACTIVATION,
                    WIDEN=widen, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                    GROUP_M=GROUP_M, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
