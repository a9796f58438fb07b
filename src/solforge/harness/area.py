"""The frames' tensor bytes in host memory that the driver and its worker both map.

Through the pipes alone, every byte of a call's inputs and outputs is copied into a pipe, out
of it and through a MAC on each side: about 0.3 s per call for a 64 MiB tensor each way, which
made the timed loops of large workloads, not the GPU, the cost of an evaluation. So each worker
gets one anonymous shared-memory file (memfd) at spawn, split in two halves, one per direction:
a frame's tensors are written into its direction's half (a device-to-host copy straight into
it) and the frame names their offsets; the reader views them there. The file is sparse: pages
exist only where a frame has written.

Nothing here is a secret from the worker, which maps both halves: the driver writes a call's
inputs only when the call starts, and copies out what it compares the moment the frame arrives
(before it sends the next inputs), so whatever the worker writes later reaches nothing the
driver holds. A frame whose tensors do not fit its half travels through the pipe as before.
Works across the sandbox's private uid, where CUDA IPC does not (handover.py).
"""

from __future__ import annotations

import mmap
import os

import torch

HALF_BYTES = 4 << 30  # per direction; a sparse file: only written pages take memory
ALIGN = 256
TO_WORKER, TO_DRIVER = 0, 1  # the halves


def create() -> int:
    """A new shared-memory file for one worker (the driver keeps the descriptor)."""
    fd = os.memfd_create("solforge-frames", os.MFD_CLOEXEC)
    os.ftruncate(fd, 2 * HALF_BYTES)
    return fd


class Area:
    """One direction's half of a worker's shared-memory file, mapped."""

    def __init__(self, fd: int, half: int) -> None:
        self.size = HALF_BYTES
        self._map = mmap.mmap(fd, HALF_BYTES, offset=half * HALF_BYTES)

    def layout(self, sizes: list[int]) -> list[int] | None:
        """Offsets for tensors of these byte sizes, one after another; None if they do not fit."""
        offsets, end = [], 0
        for size in sizes:
            offsets.append(end)
            end += -(-size // ALIGN) * ALIGN
        return offsets if end <= self.size else None

    def write(self, offset: int, tensor: torch.Tensor) -> None:
        """Copy the tensor's bytes in (from the device directly, for a device tensor)."""
        flat = tensor.detach().reshape(-1).view(torch.uint8)
        if flat.numel():
            self.view(offset, flat.numel()).copy_(flat)

    def view(self, offset: int, size: int) -> torch.Tensor:
        """The bytes at [offset, offset + size) as a uint8 tensor over the shared memory: valid
        until the next frame in this direction, so a reader that keeps them copies them."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(f"bytes [{offset}, {offset + size}) outside the shared area")
        return torch.frombuffer(self._map, dtype=torch.uint8, count=size, offset=offset)
