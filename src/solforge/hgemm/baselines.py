"""The libraries the tuned kernels are measured against, each writing into its own output.

- torch: torch.matmul(a, b, out=...), PyTorch's cuBLAS / cuBLASLt path;
- cublaslt_heuristic: cuBLASLt's first algorithm from its heuristic (nvmath-python's
  `Matmul.plan`, then `execute`);
- cublaslt_autotuned: the same plan after `Matmul.autotune` has timed its algorithms and put the
  fastest first (CUDA-L2's strongest baseline).
Both cuBLASLt baselines compute in float32 (COMPUTE_32F, nvmath's default for float16 and
bfloat16) and write into C in place (beta = 0). nvmath-python is imported here only: without it
the two cuBLASLt baselines are skipped with a note, and everything else still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.hgemm.measure import Operands

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
    _plans: list[Any] = field(default_factory=list)

    def calls(self) -> dict[str, Callable[[], object]]:
        return {name: baseline.call for name, baseline in self.baselines.items()}

    def close(self) -> None:
        """Release the cuBLASLt plans and their workspaces."""
        for plan in self._plans:
            plan.free()
        self._plans.clear()


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


def _output(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _cublaslt(a: torch.Tensor, b: torch.Tensor, autotune: bool, iterations: int,
              plans: list[Any]) -> Baseline:
    from nvmath.linalg.advanced import Matmul, MatmulOptions, MatmulPlanPreferences

    out = _output(a, b)
    plan = Matmul(a, b, c=out, beta=0.0, options=MatmulOptions(inplace=True))
    plans.append(plan)
    plan.plan(preferences=MatmulPlanPreferences(limit=PLAN_ALGORITHMS if autotune else 1))
    if autotune:
        plan.autotune(iterations=iterations)
    return Baseline(plan.execute, out)
