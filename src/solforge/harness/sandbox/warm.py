"""Trusted warm-up of the JIT caches (run in a sandbox by jit_cache.py, never with candidate
code): what every torch.compile or Triton user compiles first, whatever its kernel (Inductor's
CPU instruction-set probes, Triton's driver utilities), so a candidate's fresh private caches
start from a copy of these instead of from nothing.

    python -m solforge.harness.sandbox.warm cpu|cuda
"""

from __future__ import annotations

import sys

import torch


def _rmsnorm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5)


def warm(device: str) -> None:
    x = torch.randn(8, 64, device=device)
    torch.compile(_rmsnorm, dynamic=False)(x)
    if device == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    warm(sys.argv[1])
    print("warm", flush=True)
