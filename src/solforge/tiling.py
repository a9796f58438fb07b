"""The grouped launch order of GEMM output tiles, shared by every tiled matrix-product kernel.

Program `tile` of a (num_m x num_n) grid of output tiles takes row-tile `first_m + within %
group_rows` and column-tile `within // group_rows`: GROUP_M consecutive row-tiles sweep one band
of column tiles, so the B tiles they share are read from DRAM once per band and then hit L2.
The forge's GEMM templates carry a verbatim copy of this function, since a rendered candidate is
a standalone file; tests/forge/test_templates.py holds them equal.
"""

import triton
import triton.language as tl


@triton.jit
def tile_coordinates(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M consecutive row-tiles per band of column tiles."""
    tiles_per_group = GROUP_M * num_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    within = tile % tiles_per_group
    return first_m + within % group_rows, within // group_rows
