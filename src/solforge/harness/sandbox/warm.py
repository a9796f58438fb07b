"""Trusted warm-up of the JIT caches (run in a sandbox by jit_cache.py, never with candidate
code): what every torch.compile or Triton user compiles first, whatever its kernel (Inductor's
CPU instruction-set probes, Triton's driver utilities), and on a GPU the harness's own Triton
kernel that each worker launches before its candidate (harness/triton_warm.py), so a
candidate's fresh private caches start from a copy of these instead of from nothing.

    python -m solforge.harness.sandbox.warm cpu|cuda
"""

from __future__ import annotations

import sys

import torch


def _rmsnorm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5)


def warm(device: str) -> None:
    """Compile and run `_rmsnorm` once, with Inductor's local autotune records off.

    Inductor records a kernel's autotuned config beside the kernel's source, at the path of
    the cache it was compiled in, and a graph loaded from the cache keeps that path: a sandbox
    started from a copy of this template would write the record into the warm-up's own
    sandbox, gone and outside what it may write (a PermissionError that failed every compile
    warm-up from the template on an H100, 2026-12-06). Both the template's warm-up and the
    worker's run this function, so the kernels the template holds carry the setting (Inductor
    bakes it into their metadata; it is no part of the graph's cache key), and each sandbox's
    caches are fresh, so a record would never be read again anyway."""
    import torch._inductor.config as inductor_config

    x = torch.randn(8, 64, device=device)
    with inductor_config.patch(autotune_local_cache=False):
        torch.compile(_rmsnorm, dynamic=False)(x)
    if device == "cuda":
        torch.cuda.synchronize()
        from solforge.harness import triton_warm

        triton_warm.launch_once(torch.device(device))


if __name__ == "__main__":
    warm(sys.argv[1])
    print("warm", flush=True)
