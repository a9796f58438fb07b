"""Variants of the per-group FP8 quantiser (quant/fp8_quant_group128_deepseek_v3) that
benchmarks/variants_gpu.py times against the shipped kernel and torch.compile.

The shipped kernel took 146.5 us against torch.compile's 113.1 on the H200 at 16,384 rows of
7,168 (2026-12-03; T_SOL 74 us): one program per row padded to 64 groups (8 of them masked
off, 12.5% idle lanes), 16 warps, an IEEE division per element. Groups do not depend on each
other, so these treat the input as a flat [rows * 56, 128] array of groups, GROUPS of them a
program (no padding, neighbouring programs on neighbouring addresses, small programs many to
an SM), and divide with one IEEE reciprocal per group and Markstein's FMA correction per
element (fp8_quant_per_token.py says why it is exact).
"""

from functools import partial

import triton
import triton.language as tl
from fp8_quant_per_token import divide_exactly, encode

GROUP = 128
FP8_MAX = tl.constexpr(448.0)
AMAX_FLOOR = tl.constexpr(1e-4)


@triton.jit
def _flat_groups(x_ptr, codes_ptr, scales_ptr, total_groups, groups_per_row, x_row_stride,
                 x_col_stride, codes_row_stride, codes_col_stride, scales_row_stride,
                 scales_col_stride, GROUPS: tl.constexpr, GROUP: tl.constexpr,
                 INTERPRETED: tl.constexpr):
    group = tl.program_id(0) * GROUPS + tl.arange(0, GROUPS)
    valid = group < total_groups
    row = (group // groups_per_row).to(tl.int64)
    in_row = group % groups_per_row
    cols = in_row[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    x = tl.load(x_ptr + row[:, None] * x_row_stride + cols * x_col_stride, mask=valid[:, None],
                other=0.0)
    amax = tl.max(tl.abs(x).to(tl.float32), axis=1)
    scale = tl.div_rn(tl.maximum(amax, AMAX_FLOOR), FP8_MAX)
    inverse = tl.div_rn(tl.full([GROUPS], 1.0, tl.float32), scale)
    codes = encode(divide_exactly(x.to(tl.float32), scale[:, None], inverse[:, None],
                                  INTERPRETED), INTERPRETED)
    tl.store(codes_ptr + row[:, None] * codes_row_stride + cols * codes_col_stride, codes,
             mask=valid[:, None])
    tl.store(scales_ptr + row * scales_row_stride + in_row * scales_col_stride, scale,
             mask=valid)


def flat(x, x_fp8, x_scale, groups, num_warps):
    rows, k = x.shape
    groups_per_row = k // GROUP
    total = rows * groups_per_row
    _flat_groups[(triton.cdiv(total, groups),)](
        x, x_fp8, x_scale, total, groups_per_row, *x.stride(), *x_fp8.stride(),
        *x_scale.stride(), GROUPS=groups, GROUP=GROUP,
        INTERPRETED=triton.knobs.runtime.interpret, num_warps=num_warps)


VARIANTS = {
    "flat_g4_w4": partial(flat, groups=4, num_warps=4),
    "flat_g8_w4": partial(flat, groups=8, num_warps=4),
    "flat_g16_w8": partial(flat, groups=16, num_warps=8),
    "flat_g32_w8": partial(flat, groups=32, num_warps=8),
}
