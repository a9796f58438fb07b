"""HGEMM specialised per shape, CUDA-L2 style, with a dispatcher that never loses to cuBLAS.

`matmul(a, b)` runs the kernel the tuned table chose for the shape where it beat torch.matmul,
and torch.matmul everywhere else (dispatch.py). The pieces: space.py (shapes, kernel settings,
shortlists), kernels/ (the Triton family and the CUDA wgmma kernel), tune.py (the resumable
tuner), table.py (the tuned table), retrieve.py (unseen shapes), bench.py (the side-by-side
benchmark), measure.py and baselines.py (how it all is timed, and against what).
"""

from solforge.hgemm.dispatch import matmul, use_table
from solforge.hgemm.space import Config, Shape

__all__ = ["Config", "Shape", "matmul", "use_table"]
