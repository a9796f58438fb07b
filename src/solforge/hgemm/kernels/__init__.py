"""The HGEMM kernel family: C = A @ B for float16 and bfloat16 on Hopper, one launcher each.

| variant        | what it is for                                                            |
|----------------|---------------------------------------------------------------------------|
| tiled          | the general kernel: any strides, M, N, K; grouped tile order for L2 reuse |
| persistent     | tiled with one program per SM looping over tiles: many small tiles       |
| tma            | tiles moved by the tensor memory accelerator (host descriptors)           |
| tma_persistent | tma with one program per SM: large shapes, less launch and tail cost      |
| splitk         | K split over programs, float32 partials summed after: few tiles, long K   |
| streamk        | a persistent grid sharing out MAC iterations: a partial last wave         |
| gemv           | decode (M <= 8): CUDA-core FMAs split over N and K, bound by reading B    |
| wgmma          | CUDA C++: wgmma + TMA, producer and consumer warpgroups (sm_90a)          |

Each launcher writes A @ B into a preallocated row-major C and returns nothing; the settings
and their checks live in space.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from solforge.hgemm.kernels import gemv, splitk, streamk, tiled, tma, wgmma
from solforge.hgemm.space import Config

Launcher = Callable[[dict[str, int], torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class Variant:
    name: str
    launcher: Launcher
    fixed: dict[str, int] = field(default_factory=dict)  # settings the variant name implies
    needs_cuda: bool = False  # no interpreter path (the CUDA C++ kernel)


VARIANTS = {
    "tiled": Variant("tiled", tiled.launch, {"PERSISTENT": 0}),
    "persistent": Variant("persistent", tiled.launch, {"PERSISTENT": 1}),
    "tma": Variant("tma", tma.launch, {"PERSISTENT": 0}),
    "tma_persistent": Variant("tma_persistent", tma.launch, {"PERSISTENT": 1}),
    "splitk": Variant("splitk", splitk.launch),
    "streamk": Variant("streamk", streamk.launch),
    "gemv": Variant("gemv", gemv.launch),
    "wgmma": Variant("wgmma", wgmma.launch, needs_cuda=True),
}


def launch(config: Config, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b with the kernel and settings of `config`."""
    VARIANTS[config.kernel].launcher(settings(config), a, b, out)


@functools.lru_cache(maxsize=4096)
def settings(config: Config) -> dict[str, int]:
    """The launcher's settings of `config` (its own and its variant's), made once per config:
    the dispatcher's hot path launches the same few configs over and over. Read only."""
    return {**config.as_dict(), **VARIANTS[config.kernel].fixed}


def run(config: Config, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in a new row-major tensor."""
    out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch(config, a, b, out)
    return out


def runs_here(config: Config, device: torch.device) -> bool:
    """Whether the variant can run on this device (the CUDA kernel needs its extension)."""
    if not VARIANTS[config.kernel].needs_cuda:
        return True
    return device.type == "cuda" and wgmma.available()
