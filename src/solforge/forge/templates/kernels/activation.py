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
INV_SQRT_2 = tl.constexpr(1 / math.sqrt(2))


@triton.jit
def _activate(x, ACTIVATION: tl.constexpr):
    if ACTIVATION == "silu":
        y = x / (1.0 + tl.exp(-x))
    elif ACTIVATION == "gelu_tanh":
        z = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp(-2.0 * z))
    else:  # gelu_erf
        y = 0.5 * x * (1.0 + tl.math.erf(x * INV_SQRT_2))
    return y


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
