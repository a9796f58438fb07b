"""Freed device memory handed back to the GPU, for the processes that share one.

The driver and a reference's worker run side by side on one GPU; what one keeps cached, the
other cannot allocate. A MoE block whose weights are 22 GB filled an H200 this way.
"""

from __future__ import annotations

import torch

SPARE_BYTES = 1 << 30  # freed device memory a process may keep cached between rounds


def return_spare_memory(device: torch.device, spare_bytes: int = SPARE_BYTES) -> None:
    """Give the caching allocator's freed blocks back to the GPU when more than `spare_bytes`
    sit unused. The driver's reference and its repeatability check leave their temporaries
    cached, out of the worker's reach, and a reference's worker that makes its own inputs
    leaves the generator's draws cached: on the H200 a MoE block's driver (22 GB of inputs,
    drawn through a 28 GiB float32 temporary) held 98.6 GiB while its worker failed to allocate
    that same temporary. Below the threshold the blocks stay cached, so small problems pay no
    cudaMalloc for the next round."""
    if device.type != "cuda":
        return
    if torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) > spare_bytes:
        torch.cuda.empty_cache()
