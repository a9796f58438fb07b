"""Where an HGEMM can still be won: the roofline floor of a shape and cuBLAS's distance from it.

The floor of C[M, N] = A[M, K] @ B[K, N] in 16-bit floats is max(FLOPs / tensor peak, bytes /
DRAM bandwidth), with FLOPs = 2 M N K (a multiply and an add per (m, n, k)) and bytes = 2 (M K +
K N + M N) (A and B read once, C written once, 2 bytes an element). Peaks come from a hardware
profile (the catalog's datasheet of the GPU the run is on, or a `solforge calibrate` profile),
never from constants here. A shape whose cuBLAS time sits at the floor has nothing to win: the
tuner spends its candidates where cuBLAS is far from it (tune.py), and a pass tunes those
shapes first (plan_order).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from solforge.hardware.catalog import datasheet_for_device
from solforge.hardware.load import load_profile
from solforge.hardware.profile import HardwareProfile
from solforge.hgemm.space import Shape

DEFAULT_GPU = "H200"  # the catalog entry used when the device is not known (CPU tests)


@dataclass(frozen=True)
class Roof:
    """The two ceilings of a half-precision GEMM on one GPU."""

    name: str
    tensor_flops: float  # dense fp16 / bf16 tensor-core FLOP/s
    dram_bytes_per_s: float

    @classmethod
    def of(cls, profile: HardwareProfile) -> Roof:
        return cls(profile.name, profile.peak("tensor.fp16"), profile.dram_bytes_per_s)


@functools.cache
def roof_for(device_name: str | None = None) -> Roof:
    """The roof of the GPU the driver calls `device_name`, else the catalog's H200."""
    sheet = datasheet_for_device(device_name) if device_name else None
    return Roof.of(sheet.profile() if sheet else load_profile(DEFAULT_GPU))


def roof_of_device(device: torch.device) -> Roof:
    """The roof of a CUDA device by its name; the catalog's H200 for anything else."""
    return roof_for(torch.cuda.get_device_name(device) if device.type == "cuda" else None)


def bytes_moved(shape: Shape) -> int:
    """A and B read once and C written once, 2 bytes an element."""
    return 2 * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def floor_seconds(shape: Shape, roof: Roof) -> float:
    """max(FLOPs / tensor peak, bytes / DRAM bandwidth)."""
    return max(shape.flops / roof.tensor_flops, bytes_moved(shape) / roof.dram_bytes_per_s)


def headroom(shape: Shape, measured_s: float, roof: Roof) -> float:
    """How far `measured_s` is above the floor, as a fraction of the floor (0: at the floor)."""
    return max(0.0, measured_s / floor_seconds(shape, roof) - 1.0)


def candidates_for(headroom_fraction: float, most: int, least: int = 2,
                   skip_below: float = 0.05, full_at: float = 0.5) -> int:
    """How many candidates a shape earns: none below `skip_below` (cuBLAS is within noise of
    the floor), `most` from `full_at` up, linear between, never fewer than `least` when
    searched."""
    if headroom_fraction < skip_below:
        return 0
    share = min(1.0, headroom_fraction / full_at)
    return max(least, min(most, round(most * share)))


def plan_order(shapes: Sequence[Shape], headrooms: dict[str, float],
               cost_s: Callable[[Shape], float]) -> list[Shape]:
    """The shapes in the order a budgeted pass should tune them: the most headroom per second
    of tuning first (a shape not probed keeps its place after the probed ones)."""
    probed = [s for s in shapes if s.key in headrooms]
    rest = [s for s in shapes if s.key not in headrooms]
    probed.sort(key=lambda s: (-headrooms[s.key] / max(cost_s(s), 1e-9), s.key))
    return probed + rest
