"""Variants of the per-token FP8 quantiser (quant/fp8_quant_per_token_llama3_1_8b_down) that
benchmarks/variants_gpu.py times against the shipped kernel and torch.compile.

The shipped kernel took 312.5 us against torch.compile's 243.1 on the H200 at 16,384 rows
(2026-12-03; T_SOL 147 us): one program per row, 16 warps, and an IEEE division per element
(div.rn.f32, about ten instructions and a slow-path branch), ~100 us of issue over the 132 SMs
that overlaps badly with 2 resident programs per SM. What these change:

- `markstein`: the quotient x / scale from one IEEE reciprocal per row and, per element, a
  multiply and two FMAs (Markstein's correction: with y = RN(1/s) and q = RN(x * y), the
  remainder r = x - s * q is exact in an FMA and RN(q + r * y) = RN(x / s)), three instructions
  where the division takes about ten; the row is held as bfloat16 (half the registers) until
  the amax is known.
- `num_warps` 16 or 8 (8 warps: 56 values a thread, more programs resident per SM).
- `two_pass`: Inductor's shape: 4 warps loop over the row twice in 2,048-value chunks, the
  first for the amax, the second (from L2) for the codes; registers stay small, so many rows
  are resident per SM.

Under Triton's interpreter (no fused multiply-add: it rounds x * y before adding) the remainder
is taken in float64, exact for a float32 product, and the codes are rounded to the e4m3 grid
in float32 before the cast (the interpreter truncates in it).
"""

from functools import partial

import triton
import triton.language as tl

FP8_MAX = tl.constexpr(448.0)
MIN_SCALE = tl.constexpr(1.0 / (448.0 * 512.0))


@triton.jit
def round_to_e4m3_grid(x):
    """x (|x| <= 448) rounded to the nearest e4m3 number, ties to even, as float32: add and
    subtract 1.5 * 2**23 e4m3 spacings (2**(exponent - 3), 2**-9 under 2**-6); sign last."""
    bits = x.to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF
    spacing_exponent = tl.maximum(exponent, 127 - 6) - 3
    shifter = (((spacing_exponent + 23) << 23) | 0x400000).to(tl.float32, bitcast=True)
    rounded = (tl.abs(x) + shifter) - shifter
    return (rounded.to(tl.int32, bitcast=True) | (bits & -0x80000000)).to(tl.float32,
                                                                         bitcast=True)


@triton.jit
def divide_exactly(x, scale, inverse, INTERPRETED: tl.constexpr):
    """RN(x / scale) from inverse = RN(1 / scale): a multiply and Markstein's FMA correction."""
    quotient = x * inverse
    if INTERPRETED:
        remainder = (x.to(tl.float64) - quotient.to(tl.float64) * scale.to(tl.float64)
                     ).to(tl.float32)
        return (quotient.to(tl.float64) + remainder.to(tl.float64) * inverse.to(tl.float64)
                ).to(tl.float32)
    remainder = tl.fma(-quotient, scale, x)
    return tl.fma(remainder, inverse, quotient)


@triton.jit
def encode(scaled, INTERPRETED: tl.constexpr):
    scaled = tl.clamp(scaled, -FP8_MAX, FP8_MAX)
    if INTERPRETED:
        scaled = round_to_e4m3_grid(scaled)
    return scaled.to(tl.float8e4nv)


@triton.jit
def _rows_in_registers(x_ptr, x_fp8_ptr, x_scale_ptr, row_length, x_stride, x_fp8_stride,
                       BLOCK: tl.constexpr, INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < row_length
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    amax = tl.max(tl.abs(x).to(tl.float32), axis=0)
    scale = tl.maximum(tl.div_rn(amax, FP8_MAX), MIN_SCALE)
    inverse = tl.div_rn(1.0, scale)
    codes = encode(divide_exactly(x.to(tl.float32), scale, inverse, INTERPRETED), INTERPRETED)
    tl.store(x_fp8_ptr + row * x_fp8_stride + cols, codes, mask=mask)
    tl.store(x_scale_ptr + row, scale)


@triton.jit
def _rows_two_pass(x_ptr, x_fp8_ptr, x_scale_ptr, row_length, x_stride, x_fp8_stride,
                   CHUNK: tl.constexpr, INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_x = x_ptr + row * x_stride
    amax = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, row_length, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(row_x + cols, mask=cols < row_length, other=0.0)
        amax = tl.maximum(amax, tl.abs(x).to(tl.float32))
    scale = tl.maximum(tl.div_rn(tl.max(amax, axis=0), FP8_MAX), MIN_SCALE)
    inverse = tl.div_rn(1.0, scale)
    for start in range(0, row_length, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < row_length
        x = tl.load(row_x + cols, mask=mask, other=0.0).to(tl.float32)
        codes = encode(divide_exactly(x, scale, inverse, INTERPRETED), INTERPRETED)
        tl.store(x_fp8_ptr + row * x_fp8_stride + cols, codes, mask=mask)
    tl.store(x_scale_ptr + row, scale)


def in_registers(x, x_fp8, x_scale, num_warps):
    rows, row_length = x.shape
    _rows_in_registers[(rows,)](x, x_fp8, x_scale, row_length, x.stride(0), x_fp8.stride(0),
                                BLOCK=triton.next_power_of_2(row_length),
                                INTERPRETED=triton.knobs.runtime.interpret, num_warps=num_warps)


def two_pass(x, x_fp8, x_scale, chunk, num_warps):
    rows, row_length = x.shape
    _rows_two_pass[(rows,)](x, x_fp8, x_scale, row_length, x.stride(0), x_fp8.stride(0),
                            CHUNK=chunk, INTERPRETED=triton.knobs.runtime.interpret,
                            num_warps=num_warps)


VARIANTS = {
    "markstein_w16": partial(in_registers, num_warps=16),
    "markstein_w8": partial(in_registers, num_warps=8),
    "two_pass_2048_w4": partial(two_pass, chunk=2048, num_warps=4),
    "two_pass_4096_w8": partial(two_pass, chunk=4096, num_warps=8),
}
