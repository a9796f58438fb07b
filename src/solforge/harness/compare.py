"""Is a candidate's output right? The comparison the trusted driver makes, never the candidate.

Per output, in this order (SOL-ExecBench docs/workload.md semantics):
1. exact shape and dtype (storage shape for packed fp4);
2. NaN or Inf in the candidate fails, even where the reference has the same value, except
   matching -inf when the workload allows it; a reference with NaN/Inf is an INVALID_REFERENCE;
3. an all-zero output against a non-zero reference fails whatever the tolerance (a zero output
   is the classic answer of a kernel that did nothing);
4. element-wise |out - ref| <= max_atol + max_rtol * |ref|, in float64; the output passes when at
   least ceil(`required_matched_ratio` * n) of its n elements do (integer counts, exact at any
   n) and, when `max_error_cap` is set, the largest absolute error stays under it.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from solforge.data.definition import Definition
from solforge.data.trace import Correctness, Status
from solforge.data.workload import Tolerance
from solforge.problem.inputs import unpack_fp4
from solforge.problem.outputs import OutputMismatch, check_outputs

_MISMATCH_STATUS = {"shape": Status.INCORRECT_SHAPE, "count": Status.INCORRECT_SHAPE,
                    "dtype": Status.INCORRECT_DTYPE}


@dataclass(frozen=True)
class Comparison:
    status: Status  # PASSED, INCORRECT_*, or INVALID_REFERENCE
    correctness: Correctness | None
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


def compare_outputs(outputs: list[Any], expected: list[Any], definition: Definition,
                    shapes: dict[str, tuple[int, ...] | None], tolerance: Tolerance) -> Comparison:
    """Check every output against the reference's; the worst error is reported."""
    try:
        check_outputs(outputs, definition, shapes)
    except OutputMismatch as exc:
        return Comparison(_MISMATCH_STATUS[exc.kind], None, str(exc))
    worst = Correctness()
    for name, out, ref in zip(definition.outputs, outputs, expected):
        verdict = _compare_one(name, out, ref, tolerance)
        if not verdict.passed:
            return verdict
        worst = worst_of(worst, verdict.correctness)
    return Comparison(Status.PASSED, worst)


_CHUNK = 1 << 25
"""Elements compared per pass: 256 MiB per float64 temporary, so a multi-GiB output (an LM head's
logits, 2 G elements) is checked in bounded memory instead of several float64 copies of it."""


@dataclass(frozen=True)
class _Tally:
    """What one pass over a slice of an output finds; passes merge with `+`."""

    ref_bad: bool = False  # NaN/Inf in the reference, not excused as a shared -inf
    has_nan: bool = False
    has_inf: bool = False
    kept: int = 0  # elements compared (shared -infs excused)
    within: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    ref_nonzero: bool = False
    out_nonzero: bool = False

    def __add__(self, other: _Tally) -> _Tally:
        return _Tally(self.ref_bad or other.ref_bad, self.has_nan or other.has_nan,
                      self.has_inf or other.has_inf, self.kept + other.kept,
                      self.within + other.within, max(self.max_abs, other.max_abs),
                      max(self.max_rel, other.max_rel), self.ref_nonzero or other.ref_nonzero,
                      self.out_nonzero or other.out_nonzero)


def _compare_one(name: str, out: Any, ref: Any, tolerance: Tolerance) -> Comparison:
    ref_flat, out_flat = _logical(ref).reshape(-1), _logical(out).reshape(-1)
    if ref_flat.numel() != out_flat.numel():
        return Comparison(Status.INCORRECT_SHAPE, None,
                          f"output {name!r} has {out_flat.numel()} elements; the reference's "
                          f"has {ref_flat.numel()}")
    tally = _Tally()
    for start in range(0, ref_flat.numel(), _CHUNK):
        ref_part = ref_flat[start:start + _CHUNK]
        out_part = out_flat[start:start + _CHUNK]
        tally = tally + _tally(_reductions(out_part, ref_part, tolerance))
    return _verdict(name, tally, tolerance)


def _reductions(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance) -> list[float]:
    """The nine reductions of one slice (see `_tally`), read back in one transfer: on a GPU
    each `bool()` or `float()` of a reduction waits for the device (the H200's comparisons
    took 0.55 s of an optimizer candidate's 5.9 s with nine such waits and a masked copy per
    slice, 2026-12-02). Float outputs on a GPU take compare_kernel.py's one pass; the rest
    the float64 tensors here. Excused elements (shared -infs) count nowhere."""
    if ref.is_cuda:
        found = _one_pass(out, ref, tolerance)
        if found is not None:
            return found
    return _float64_reductions(out, ref, tolerance)


def _float64_reductions(out: torch.Tensor, ref: torch.Tensor,
                        tolerance: Tolerance) -> list[float]:
    """The nine reductions by torch's kernels on float64 copies of the slice."""
    floor = _floor(tolerance)
    ref64 = ref.to(torch.float64)
    out64 = out.to(ref64.device, torch.float64)
    both_neg_inf = (out64 == -torch.inf) & (ref64 == -torch.inf)
    excused = both_neg_inf if tolerance.allow_negative_inf else torch.zeros_like(both_neg_inf)
    kept = ~excused
    magnitude = ref64.abs()
    error = torch.where(kept, (out64 - ref64).abs(), 0.0)
    bound = tolerance.max_atol + tolerance.max_rtol * magnitude
    # Relative to |ref|, floored (`_floor`).
    relative = torch.where(kept, error / magnitude.clamp(min=floor), 0.0)
    return torch.stack([
        (~(torch.isfinite(ref64) | excused)).any(), torch.isnan(out64).any(),
        (torch.isinf(out64) & kept).any(), kept.sum(), ((error <= bound) & kept).sum(),
        error.max(), relative.max(), ((ref64 != 0) & kept).any(), ((out64 != 0) & kept).any(),
    ]).tolist()


def _floor(tolerance: Tolerance) -> float:
    """The relative error's denominator floor: atol, and above zero (exact comparisons give
    0, not 0/0)."""
    return max(tolerance.max_atol, torch.finfo(torch.float64).tiny)


def _kernel() -> Any:
    """compare_kernel.py, imported on a GPU's first comparison (it imports Triton)."""
    from solforge.harness import compare_kernel

    return compare_kernel


_ONE_PASS_TRUSTED: dict[torch.device, bool] = {}  # per device, for this process


def one_pass_trusted(device: torch.device) -> bool:
    """Whether compare_kernel.py's pass is used on `device`: on its first use in a process it
    must give exactly what the float64 path gives on a few slices (noise, NaN, Inf, shared
    -inf, two dtypes, two tolerances); if it differs or fails, every comparison on that device
    takes the float64 path, and a line on stderr says why."""
    if device not in _ONE_PASS_TRUSTED:
        try:
            agrees = _one_pass_agrees(_kernel(), device)
            reason = "it disagreed with the float64 path on a known slice"
        except Exception as exc:  # a kernel that cannot run never decides a verdict
            agrees, reason = False, f"{type(exc).__name__}: {exc}"
        _ONE_PASS_TRUSTED[device] = agrees
        if not agrees:
            print(f"solforge: comparisons on {device} use the float64 torch path: the one-pass "
                  f"kernel is off ({reason})", file=sys.stderr)
    return _ONE_PASS_TRUSTED[device]


def _one_pass(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance) -> list[float] | None:
    """compare_kernel.py's reductions where it takes the slice and is trusted on its device;
    None leaves the slice to the float64 path (as does a failure, which turns it off)."""
    kernel = _kernel()
    if not kernel.eligible(out, ref) or not one_pass_trusted(ref.device):
        return None
    try:
        return kernel.tally(out, ref, tolerance.max_atol, tolerance.max_rtol, _floor(tolerance),
                            tolerance.allow_negative_inf)
    except Exception as exc:
        _ONE_PASS_TRUSTED[ref.device] = False
        print(f"solforge: comparisons on {ref.device} use the float64 torch path from now on: "
              f"the one-pass kernel failed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def _one_pass_agrees(kernel: Any, device: torch.device) -> bool:
    generator = torch.Generator().manual_seed(11)
    ref = torch.randn(4099, generator=generator, dtype=torch.float64)
    out = ref + 0.02 * torch.randn(4099, generator=generator, dtype=torch.float64)
    ref[[5, 4000]] = out[[5, 4000]] = -math.inf  # shared -infs
    poisoned = out.clone()
    poisoned[[17, 2049]] = torch.tensor([math.nan, math.inf], dtype=torch.float64)
    tolerances = (Tolerance(), Tolerance(max_atol=0.0, max_rtol=0.05, allow_negative_inf=True))
    for dtype in (torch.bfloat16, torch.float32):
        for candidate in (out, poisoned):
            for tolerance in tolerances:
                plain = _float64_reductions(candidate.to(dtype), ref.to(dtype), tolerance)
                fused = kernel.tally(candidate.to(device, dtype), ref.to(device, dtype),
                                     tolerance.max_atol, tolerance.max_rtol, _floor(tolerance),
                                     tolerance.allow_negative_inf)
                ends = any(plain[:3])  # a NaN or Inf ends it: the maxima then say nothing
                if fused[:3] != plain[:3] or (not ends and fused != plain):
                    return False
    return True


def _tally(found: list[float]) -> _Tally:
    """One slice's tally from its reductions: [reference NaN/Inf (not excused), output NaN,
    output Inf, elements kept, kept within the bound, largest absolute error, largest
    relative error, reference non-zero, output non-zero]."""
    ref_bad, has_nan, has_inf = (bool(flag) for flag in found[:3])
    if ref_bad or has_nan or has_inf:
        return _Tally(ref_bad, has_nan, has_inf)
    if not found[3]:
        return _Tally()
    return _Tally(kept=int(found[3]), within=int(found[4]), max_abs=found[5], max_rel=found[6],
                  ref_nonzero=bool(found[7]), out_nonzero=bool(found[8]))


def _verdict(name: str, tally: _Tally, tolerance: Tolerance) -> Comparison:
    if tally.ref_bad:
        return Comparison(Status.INVALID_REFERENCE, None,
                          f"the reference's {name!r} holds NaN or Inf at this seed")
    if tally.has_nan or tally.has_inf:
        what = "NaN" if tally.has_nan else "Inf"
        return Comparison(Status.INCORRECT_NUMERICAL,
                          Correctness(has_nan=tally.has_nan,
                                      has_inf=tally.has_inf and not tally.has_nan),
                          f"output {name!r} holds {what}")
    total = tally.kept
    if total == 0:
        return Comparison(Status.PASSED, Correctness(matched_ratio=1.0))
    within, max_abs = tally.within, tally.max_abs
    matched = within / total
    correctness = Correctness(tally.max_rel, max_abs, matched_ratio=matched)
    if tally.ref_nonzero and not tally.out_nonzero:
        return Comparison(Status.INCORRECT_NUMERICAL, correctness,
                          f"output {name!r} is all zeros; the reference is not")
    needed = required_count(tolerance.required_matched_ratio, total)
    if within < needed:
        return Comparison(Status.INCORRECT_NUMERICAL, correctness,
                          f"output {name!r}: {within} of {total} elements ({matched:.4%}) within "
                          f"atol={tolerance.max_atol:g}, rtol={tolerance.max_rtol:g} (needs "
                          f"{needed}, {tolerance.required_matched_ratio:.2%}); max abs error "
                          f"{max_abs:.3g}")
    cap = tolerance.max_error_cap
    if cap is not None and max_abs > cap:
        return Comparison(Status.INCORRECT_NUMERICAL, correctness,
                          f"output {name!r}: max abs error {max_abs:.3g} above the cap {cap:g}")
    return Comparison(Status.PASSED, correctness)


def required_count(ratio: float, total: int) -> int:
    """ceil(ratio * total) in exact arithmetic: the fewest elements that must be within bounds.

    A float mean of a boolean mask (a sum times 1/N) can land one ulp under 1.0 for N near 2^28,
    failing a perfect output against a required ratio of 1.0; counting in integers and turning
    the ratio as written (its shortest decimal, so 0.1 is 1/10, not the binary float above it)
    into an exact fraction keeps the comparison exact at any size.
    """
    exact = Fraction(repr(float(ratio))) * total
    return min(total, math.ceil(exact))


def _logical(value: Any) -> torch.Tensor:
    """A tensor of the logical values in their own dtype (packed fp4 unpacked, scalars as 0-D)."""
    if not isinstance(value, torch.Tensor):
        return torch.tensor(float(value), dtype=torch.float64)
    if value.dtype == torch.float4_e2m1fn_x2:
        return unpack_fp4(value)
    return value


def worst_of(a: Correctness | None, b: Correctness | None) -> Correctness | None:
    """The larger errors and the smaller matched ratio of two comparisons."""
    if a is None or b is None:
        return a or b
    ratios = [r for r in (a.matched_ratio, b.matched_ratio) if r is not None]
    return Correctness(max(a.max_relative_error, b.max_relative_error),
                       max(a.max_absolute_error, b.max_absolute_error),
                       matched_ratio=min(ratios) if ratios else None)
