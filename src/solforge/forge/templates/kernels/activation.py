"""An activation over the last axis, plain (out = act(x)) or gated (out = act(gate) * up).

The gated form reads vLLM's fused layout: each row of the input holds the gate half, then the
up half (SwiGLU with silu, GeGLU with gelu). A 1-D grid of tiles: tile t handles columns
[c * BLOCK, (c + 1) * BLOCK) of row t // BLOCKS_PER_ROW, c = t % BLOCKS_PER_ROW, so a row's
column blocks are consecutive programs and consecutive programs walk consecutive addresses, as
a flat elementwise kernel does. A (row, column block) grid runs rows fastest instead:
neighbouring programs then read chunks a whole row apart, and on the H200 that cost the shipped
SwiGLU 3% against torch.compile (2026-12-03) and left this template's GELU at 0.94x
torch.compile where the shipped flat kernel ran at 1.14x (2026-12-04). DRAM traffic is the fused
minimum: every input element read once, every output written once (gated: 3 * width elements
per row; plain: 2 * width).

VECTOR is the access width in elements: the column indices are declared to come in aligned
runs of VECTOR (tl.multiple_of / tl.max_contiguous), so where the row stride allows it each
thread issues VECTOR-wide loads (8 bf16 = one 16-byte vector); VECTOR = 1 forces scalar
accesses. The arithmetic is float32; ROUND_ACTIVATION rounds act(gate) to the output dtype
before the product, as PyTorch's unfused F.silu(gate) * up does.

gelu_tanh is 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x + 0.044715 x^3), computed as
x * sigmoid(2 z) (the same function: 1 + tanh(z) = 2 sigmoid(2 z)) with one exp.

gelu_erf is 0.5 x (1 + erf(x / sqrt(2))) with erf from Abramowitz and Stegun 7.1.26 (absolute
error <= 1.5e-7, below a float16 or bfloat16 step of the result): one approximate reciprocal, a
degree-5 polynomial and one exp2. Compiled for sm_90 with Triton 3.6 (16 float16 elements a
thread), the kernel is 401 SASS instructions with it against 579 with libdevice's erff: 25 an
element against 36. A half-precision GELU has about 28 to spend (2 bytes in and 2 out per
element at 4.8 TB/s, against 132 SMs x 128 lanes at 1.98 GHz), so with erff it is issue-bound
on the H200, as the shipped Whisper GELU was (0.62 of T_SOL).
"""

import math

import triton
import triton.language as tl

# Template parameters (rewritten by render).
BLOCK = 1024
NUM_WARPS = 4
VECTOR = 8
# What the problem computes (identified by the template's probe).
ACTIVATION = "silu"
GATED = True
ROUND_ACTIVATION = True

SQRT_2_OVER_PI = tl.constexpr(math.sqrt(2 / math.pi))
# Abramowitz and Stegun 7.1.26: erf(z) = 1 - t (A1 + t (A2 + ... + t A5)) exp(-z^2),
# t = 1 / (1 + P z), for z >= 0.
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# With z = |x| / sqrt(2): P z = ERF_P_X |x|, exp(-z^2) = exp2(-LOG2E_HALF x^2), and the 0.5 of
# GELU folded into the coefficients.
ERF_P_X = tl.constexpr(ERF_P / math.sqrt(2))
LOG2E_HALF = tl.constexpr(0.5 / math.log(2))
HALF_A1, HALF_A2, HALF_A3, HALF_A4, HALF_A5 = (tl.constexpr(0.5 * a) for a in ERF_A)


@triton.jit
def _activate(x, ACTIVATION: tl.constexpr):
    if ACTIVATION == "silu":
        y = x / (1.0 + tl.exp(-x))
    elif ACTIVATION == "gelu_tanh":
        z = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp(-2.0 * z))
    else:  # gelu_erf
        y = _gelu_erf(x)
    return y


@triton.jit
def _gelu_erf(x):
    """0.5 x (1 + erf(x / sqrt(2))). With h = 0.5 x (1 - erf(|x| / sqrt(2))), GELU is h for
    x < 0 (erf is odd) and x - h for x >= 0; past |x| ~ 13 the exp2 underflows to 0, so h is 0
    and GELU is x or 0, as it should be."""
    t = tl.fdiv(1.0, 1.0 + ERF_P_X * tl.abs(x), ieee_rounding=False)
    half_poly = t * (HALF_A1 + t * (HALF_A2 + t * (HALF_A3 + t * (HALF_A4 + t * HALF_A5))))
    h = x * half_poly * tl.exp2(-LOG2E_HALF * x * x)
    return tl.where(x >= 0, x - h, h)


@triton.jit
def _activation_rows(in_ptr, out_ptr, width, in_row_stride, out_row_stride,
                     ACTIVATION: tl.constexpr, GATED: tl.constexpr,
                     ROUND_ACTIVATION: tl.constexpr, BLOCK: tl.constexpr,
                     VECTOR: tl.constexpr, BLOCKS_PER_ROW: tl.constexpr):
    tile = tl.program_id(0)
    row = (tile // BLOCKS_PER_ROW).to(tl.int64)
    cols = (tile % BLOCKS_PER_ROW) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.max_contiguous(tl.multiple_of(cols, VECTOR), VECTOR)
    mask = cols < width
    in_row = in_ptr + row * in_row_stride
    x = tl.load(in_row + cols, mask=mask, other=0.0).to(tl.float32)
    y = _activate(x, ACTIVATION)
    out_dtype = out_ptr.dtype.element_ty
    if GATED:
        up = tl.load(in_row + width + cols, mask=mask, other=0.0).to(tl.float32)
        if ROUND_ACTIVATION:
            y = y.to(out_dtype).to(tl.float32)
        y = y * up
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_dtype), mask=mask)


def activation(x, out):
    """out[r, :] = act(x[r, :]) or act(gate) * up, for a 2-D x and out."""
    rows, width = out.shape
    blocks_per_row = triton.cdiv(width, BLOCK)
    _activation_rows[(rows * blocks_per_row,)](
        x, out, width, x.stride(0), out.stride(0), ACTIVATION=ACTIVATION, GATED=GATED,
        ROUND_ACTIVATION=ROUND_ACTIVATION, BLOCK=BLOCK, VECTOR=VECTOR,
        BLOCKS_PER_ROW=blocks_per_row, num_warps=NUM_WARPS)
