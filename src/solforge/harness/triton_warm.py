"""Triton's first launch in a process, made by the harness before its candidate exists.

The first kernel a process launches through Triton's JIT does work that no later launch does
again: the launch path's argument specialisation (in libtriton) imports Triton's Gluon modules
on its first use, 0.18 s of a Triton candidate's first call on an H100 (2026-12-06,
benchmarks/first_call_profile.py), and the JIT's per-device state is set up. A worker serves
one candidate, so every Triton candidate paid that inside its first call, under the GPU's
shared lock (device_lock.py), while no other unit could time. A one-element kernel of the
harness's own, launched while a pre-spawned worker waits for its candidate (or in a worker's
own warm-up), pays it off that path. Its compiled form is in the sandbox's warm JIT template
(sandbox/warm.py), so the launch finds it on disk instead of compiling it.

Nothing here decides a verdict: it only leaves Triton's modules imported.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store(target, value):
    tl.store(target, value)


def launch_once(device: torch.device) -> bool:
    """Launch `_store` once on `device` (a CUDA device) and wait for it; False where it cannot
    run (no GPU, no compiler): the candidate's first call then does that work, as before."""
    if device.type != "cuda":
        return False
    try:
        target = torch.zeros(1, dtype=torch.int32, device=device)
        _store[(1,)](target, 3)
        torch.cuda.synchronize(device)
    except Exception:  # a head start only
        return False
    return True
