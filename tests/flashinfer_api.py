"""Every FlashInfer call the library baselines generate, checked against FlashInfer's real Python
API on the CPU: each call's arguments are bound to the real function's signature (a misspelt
keyword, a missing argument or one too many fails here, as it would on the GPU), then answered by
the stand-in of fake_flashinfer.py, and the baseline's outputs compared with the reference's on
the problem's smallest workload. FlashInfer's kernels never run.

    PYTHONPATH=SITE:tests python tests/flashinfer_api.py

SITE holds flashinfer-python (CI installs it there); run in a process of its own by
test_flashinfer_api.py, so that no other test sees the real package.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import fake_flashinfer
import torch

from solforge.harness.library_baselines import ENTRY, library_baseline
from solforge.problem import make_inputs
from solforge.problem.reference import load_reference_module
from solforge.problem.suite import address_of, bundled_problem_dirs, open_problem

FUNCTIONS = ("norm.rmsnorm", "norm.gemma_rmsnorm", "rope.apply_rope_with_cos_sin_cache",
             "sampling.top_k_renorm_probs")


class _Sink:
    def setitem(self, mapping: dict, key: str, value: Any) -> None:
        mapping[key] = value


def _bound(real: Callable, answer: Callable, signature_of: Callable | None = None) -> Callable:
    signature = inspect.signature(signature_of or real)

    def call(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # TypeError where the real API would refuse the call
        return answer(*args, **kwargs)

    return call


def checked_flashinfer() -> types.ModuleType:
    """The stand-in, every entry point guarded by the real one's signature."""
    real = importlib.import_module("flashinfer")
    fake_flashinfer.install(_Sink())
    fake = sys.modules["flashinfer"]
    for path in FUNCTIONS:
        space, name = path.split(".")
        setattr(getattr(fake, space), name, _bound(getattr(getattr(real, space), name),
                                                   getattr(getattr(fake, space), name)))
    # The decode wrapper's plan() takes **kwargs and passes them on: its keywords are
    # _plan_impl's.
    decode = real.BatchDecodeWithPagedKVCacheWrapper
    fake.BatchDecodeWithPagedKVCacheWrapper = _checked_wrapper(
        decode, fake.BatchDecodeWithPagedKVCacheWrapper, decode._plan_impl)
    prefill = real.BatchPrefillWithRaggedKVCacheWrapper
    fake.BatchPrefillWithRaggedKVCacheWrapper = _checked_wrapper(
        prefill, fake.BatchPrefillWithRaggedKVCacheWrapper, prefill.plan)
    return fake


def _checked_wrapper(wrapper: type, stand_in: type, plan: Callable) -> type:
    """The stand-in with each call bound first to the real wrapper's signature (`plan`: the
    function whose signature names plan()'s keywords)."""

    class Checked(stand_in):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inspect.signature(wrapper.__init__).bind(self, *args, **kwargs)
            super().__init__(*args, **kwargs)

        def plan(self, *args: Any, **kwargs: Any) -> None:
            inspect.signature(plan).bind(self, *args, **kwargs)
            super().plan(*args, **kwargs)

        def run(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            inspect.signature(wrapper.run).bind(self, *args, **kwargs)
            return super().run(*args, **kwargs)

    return Checked


def check(address: str) -> str | None:
    """What is wrong with the problem's FlashInfer baseline, or None."""
    problem = open_problem(address)
    baseline = library_baseline(problem.definition)
    namespace: dict[str, Any] = {}
    exec(compile(baseline.solution.sources[0].content, baseline.name, "exec"), namespace)
    inputs = list(make_inputs(problem, problem.smallest_workload()).values())
    try:
        got = namespace[ENTRY](*inputs)
    except TypeError as exc:
        return f"the real API refuses the call: {exc}"
    want = load_reference_module(problem.definition).run(*inputs)
    got, want = (v if isinstance(v, tuple) else (v,) for v in (got, want))
    for out, expected in zip(got, want, strict=True):
        if out.shape != expected.shape or not torch.allclose(out.float(), expected.float(),
                                                             rtol=1e-2, atol=1e-2):
            return "outputs differ from the reference's"
    return None


def main() -> int:
    checked_flashinfer()
    problems = [address_of(folder) for folder in bundled_problem_dirs()]
    found = [address for address in problems
             if (b := library_baseline(open_problem(address).definition)) is not None
             and b.library == "flashinfer-python"]
    failures = {address: problem for address in found if (problem := check(address))}
    for address in found:
        print(f"{address}: {failures.get(address, 'ok')}")
    return 1 if failures or not found else 0


if __name__ == "__main__":
    sys.exit(main())
