"""The comparison's reductions in one pass over the outputs, on a GPU (compare.py's fast path).

compare.py checks an output in float64: both tensors converted, then about thirty elementwise
kernels and reductions, each writing or reading float64 temporaries. For an RMSNorm output of
8192 x 4096 bf16 (67 MB) that is several GB of device traffic per comparison; with 78
comparisons a candidate (6 workloads x (5 rounds + 8 chosen timed calls)), `compare` took 0.80 s
of each optimizer candidate with 3 units on an H100 (2026-12-05), under the GPU's shared lock.

This kernel reads each element of the output and the reference once, converts it to float64 in
registers and makes the same tests as compare.py's torch path, in the same float64 arithmetic:
per block of elements it writes nine partial results, which a few small reductions combine.
Multiply and add are not fused, so every bound rounds as there. Tolerances arrive as float64
through memory (a Python float argument would be float32 in Triton, and the relative error's
floor, the smallest float64, would underflow to zero).

Each block's row of `partials`: [reference not finite (and not a shared -inf it excuses),
output NaN, output Inf (kept elements), kept elements, kept elements within the bound, largest
absolute error, largest relative error, reference non-zero, output non-zero]; counts exact in
float64 up to 2^53 elements.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
BLOCK = 2048
COLUMNS = 9
# No fused multiply-add: `atol + rtol * |ref|` rounds twice, as torch's two kernels do.
OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _tally_blocks(out_ptr, ref_ptr, limits_ptr, partials_ptr, n,
                  ALLOW_NEG_INF: tl.constexpr, BLOCK: tl.constexpr):
    block = tl.program_id(0).to(tl.int64)
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    out = tl.load(out_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
    ref = tl.load(ref_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
    atol = tl.load(limits_ptr)
    rtol = tl.load(limits_ptr + 1)
    floor = tl.load(limits_ptr + 2)
    infinity = float("inf")
    if ALLOW_NEG_INF:  # noqa: SIM108 (a branch Triton resolves at compile time)
        excused = (out == -infinity) & (ref == -infinity)
    else:
        excused = offsets < 0  # none
    kept = inside & (excused == 0)
    ref_finite = (ref == ref) & (tl.abs(ref) != infinity)
    ref_bad = inside & (ref_finite == 0) & (excused == 0)
    out_nan = inside & (out != out)
    out_inf = kept & (tl.abs(out) == infinity)
    magnitude = tl.abs(ref)
    error = tl.where(kept, tl.abs(out - ref), 0.0)
    bound = atol + rtol * magnitude
    relative = tl.where(kept, error / tl.maximum(magnitude, floor), 0.0)
    within = kept & (error <= bound)
    row = partials_ptr + block * 9
    tl.store(row, tl.max(ref_bad.to(tl.float64), axis=0))
    tl.store(row + 1, tl.max(out_nan.to(tl.float64), axis=0))
    tl.store(row + 2, tl.max(out_inf.to(tl.float64), axis=0))
    tl.store(row + 3, tl.sum(kept.to(tl.float64), axis=0))
    tl.store(row + 4, tl.sum(within.to(tl.float64), axis=0))
    tl.store(row + 5, tl.max(error, axis=0))
    tl.store(row + 6, tl.max(relative, axis=0))
    tl.store(row + 7, tl.max((kept & (ref != 0)).to(tl.float64), axis=0))
    tl.store(row + 8, tl.max((kept & (out != 0)).to(tl.float64), axis=0))


def eligible(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether the one-pass kernel takes this pair: flat contiguous float tensors of one CUDA
    device, not empty, and the kernel compiled, not interpreted (anything else goes through
    compare.py's torch path)."""
    return (out.is_cuda and ref.is_cuda and out.device == ref.device and not interpreted()
            and out.dtype in FLOATS and ref.dtype in FLOATS
            and out.dim() == 1 and ref.dim() == 1 and out.numel() == ref.numel() > 0
            and out.is_contiguous() and ref.is_contiguous())


def interpreted() -> bool:
    """Whether this process's Triton runs the kernel in its interpreter (TRITON_INTERPRET=1
    when Triton was imported, as the CPU tests set it): there it works, slowly, on CPU tensors;
    on a GPU's it would copy every block through the host, minutes for one output (a GPU test
    run under the tests' setting sat 5 minutes in one comparison on an H100, 2026-12-06)."""
    return isinstance(_tally_blocks, InterpretedFunction)


def tally(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, floor: float,
          allow_negative_inf: bool) -> list[float]:
    """compare.py's nine reductions of one slice, read back in one transfer."""
    n = ref.numel()
    blocks = triton.cdiv(n, BLOCK)
    limits = torch.tensor([atol, rtol, floor], dtype=torch.float64, device=ref.device)
    partials = torch.empty((blocks, COLUMNS), dtype=torch.float64, device=ref.device)
    # launched on the tensors' device, whichever is current (Triton's interpreter: the CPU)
    on = torch.cuda.device(ref.device) if ref.is_cuda else contextlib.nullcontext()
    with on:
        _tally_blocks[(blocks,)](out, ref, limits, partials, n,
                                 ALLOW_NEG_INF=allow_negative_inf, BLOCK=BLOCK, **OPTIONS)
    combined = torch.cat([partials[:, 0:3].amax(dim=0), partials[:, 3:5].sum(dim=0),
                          partials[:, 5:9].amax(dim=0)])
    return combined.tolist()


def warm_up(dtypes: set[torch.dtype], allow_negative_inf: set[bool],
            device: torch.device) -> int:
    """Compile (or load from Triton's cache) the kernel for these output dtypes, both ways
    Triton specialises the length (a multiple of 16 or not) and each -inf rule, so that a
    comparison made under the GPU's shared lock finds it ready. The variants made."""
    made = 0
    for dtype in sorted((d for d in dtypes if d in FLOATS), key=str):
        for n, allow in ((n, a) for n in (16, 17) for a in sorted(allow_negative_inf)):
            values = torch.zeros(n, dtype=dtype, device=device)
            tally(values, values, 0.0, 0.0, torch.finfo(torch.float64).tiny, allow)
            made += 1
    return made
