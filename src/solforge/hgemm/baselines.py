"""The libraries the tuned kernels are measured against, each writing into its own output.

- torch: torch.matmul(a, b, out=...), PyTorch's cuBLAS / cuBLASLt path;
- cublaslt_heuristic: cuBLASLt's first algorithm from its heuristic (nvmath-python's
  `Matmul.plan`, then `execute`);
- cublaslt_autotuned: the same plan after `Matmul.autotune` has timed its algorithms and put the
  fastest first (CUDA-L2's strongest baseline).
Both cuBLASLt baselines compute in float32 (COMPUTE_32F, nvmath's default for float16 and
bfloat16) and write into C in place (beta = 0). nvmath-python is imported here only: without it
the two cuBLASLt baselines are skipped with a note, and everything else still runs.

A baseline is a guest: whatever it raises (nvmath raises cuda.core's CUDAError, not a
RuntimeError) is caught where it is called, noted for that shape, and the run goes on.
Releasing a plan is the known trap: `Matmul.free()` makes its workspace stream wait on the
plan's last compute event, and after the plan was executed inside a CUDA-graph capture that
event belongs to the capture, so the wait fails with CUDA_ERROR_INVALID_VALUE (the H200 run of
2026-12-01 died there). `release` therefore executes the plan once eagerly (a real event
again), synchronizes, then frees; if freeing still fails the plan is dropped with a note, its
workspace left to the garbage collector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.hgemm.measure import Call, Measurer, Operands, relative_error

BASELINES = ("torch", "cublaslt_heuristic", "cublaslt_autotuned")
NVMATH_MISSING = ("nvmath-python is not installed: the cuBLASLt heuristic and autotuned "
                  "baselines are skipped (carry its wheel: benchmarks/hgemm_gpu.py says how)")
PLAN_ALGORITHMS = 16  # algorithms the autotuned plan considers (nvmath's default is 8)


@dataclass
class Baseline:
    call: Callable[[], object]
    out: torch.Tensor


@dataclass
class BaselineSet:
    baselines: dict[str, Baseline] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _plans: list[tuple[str, Any]] = field(default_factory=list)  # (baseline name, nvmath plan)

    def calls(self) -> dict[str, Callable[[], object]]:
        return {name: baseline.call for name, baseline in self.baselines.items()}

    def close(self) -> None:
        """Release the cuBLASLt plans and their workspaces; never raises (module docstring)."""
        for name, plan in self._plans:
            problem = release(plan)
            if problem:
                self.notes.append(f"{name}: {problem}")
        self._plans.clear()


def release(plan: Any) -> str | None:
    """Free one nvmath plan safely: an eager execute and a synchronize first, so its last
    compute event is not a graph capture's. The problem, or None when it was freed."""
    try:
        plan.execute()
        _synchronize()
        plan.free()
    except Exception as exc:  # nvmath and cuda.core raise their own error types
        return (f"its plan could not be freed ({type(exc).__name__}: {str(exc)[:200]}); "
                "dropped, its workspace left to the garbage collector")
    return None


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def make_baselines(operands: Operands, names: tuple[str, ...] = BASELINES,
                   autotune_iterations: int = 5) -> BaselineSet:
    a, b = operands.a, operands.b
    found = BaselineSet()
    if "torch" in names:
        out = _output(a, b)
        found.baselines["torch"] = Baseline(lambda: torch.matmul(a, b, out=out), out)
    wanted = [name for name in names if name.startswith("cublaslt")]
    if not wanted:
        return found
    try:
        import nvmath  # noqa: F401
    except ImportError:
        found.notes.append(NVMATH_MISSING)
        return found
    for name in wanted:
        try:
            found.baselines[name] = _cublaslt(a, b, name == "cublaslt_autotuned",
                                              autotune_iterations, found._plans)
        except Exception as exc:  # nvmath raises its own and cuBLAS's error types
            found.notes.append(f"{name} could not be planned: {type(exc).__name__}: {exc}")
    return found


def baseline_checks(found: BaselineSet, measurer: Measurer, operands: Operands
                    ) -> tuple[dict[str, float | None], dict[str, Call], list[str]]:
    """Each baseline run once and checked against the float32 product. A baseline that raises
    is noted and left out of the timings of this shape: one failing library never ends a run.
    Returns the errors, the calls that work, and the notes."""
    errors: dict[str, float | None] = {}
    working: dict[str, Call] = {}
    notes = []
    for name, baseline in found.baselines.items():
        try:
            baseline.call()
            measurer.synchronize()
        except Exception as exc:  # nvmath raises cuda.core's and cuBLAS's own error types
            errors[name] = None
            notes.append(f"{name} failed at this shape: {type(exc).__name__}: "
                         f"{str(exc)[:200]}")
            continue
        errors[name] = relative_error(baseline.out, operands.reference)
        working[name] = baseline.call
    return errors, working, notes


def _output(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _cublaslt(a: torch.Tensor, b: torch.Tensor, autotune: bool, iterations: int,
              plans: list[tuple[str, Any]]) -> Baseline:
    from nvmath.linalg.advanced import Matmul, MatmulOptions, MatmulPlanPreferences

    out = _output(a, b)
    plan = Matmul(a, b, c=out, beta=0.0, options=MatmulOptions(inplace=True))
    plans.append(("cublaslt_autotuned" if autotune else "cublaslt_heuristic", plan))
    plan.plan(preferences=MatmulPlanPreferences(limit=PLAN_ALGORITHMS if autotune else 1))
    if autotune:
        plan.autotune(iterations=iterations)
    return Baseline(plan.execute, out)
