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

In a process that uses CUDA, each side page-locks (cudaHostRegister) the prefix of its mapping
that frames have used: a copy between the GPU and pageable memory is staged through a driver
buffer, one between the GPU and page-locked memory runs at the bus's speed. The prefix grows
by doubling, so a workload re-pins a few times at most; `SOLFORGE_PIN_AREA=0` leaves the area
pageable, and a refused registration does the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os

import torch

# Per direction; a sparse file (memfd, no reservation): only written pages take memory. The
# suite's largest call needs 21.1 GiB of inputs (l2/moe_block_deepseek_v3: 256 experts' bf16
# weights) and 8.0 GiB of outputs; at 4 GiB, 20 of its 831 workloads (11 problems) did not fit
# and went through the pipe and its MAC (about 0.3 s per 64 MiB: a 4.3 GB decode call timed
# out on the H200).
HALF_BYTES = 24 << 30
ALIGN = 256
TO_WORKER, TO_DRIVER = 0, 1  # the halves
PIN_ENV = "SOLFORGE_PIN_AREA"  # "0": never page-lock
PIN_STEP = 64 << 20  # the page-locked prefix grows in whole steps of this


def pinned_size(current: int, needed: int, limit: int) -> int:
    """The page-locked prefix once a frame needs `needed` bytes: unchanged when it covers
    them, else at least doubled, in whole PIN_STEPs, never past `limit`."""
    if needed <= current:
        return current
    grown = max(needed, 2 * current, PIN_STEP)
    return min(limit, -(-grown // PIN_STEP) * PIN_STEP)


def aligned(sizes: list[int]) -> tuple[list[int], int]:
    """Offsets for blocks of these byte sizes laid one after another, each ALIGN-aligned, and
    the end of the last."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-size // ALIGN) * ALIGN
    return offsets, end


def create() -> int:
    """A new shared-memory file for one worker (the driver keeps the descriptor)."""
    fd = os.memfd_create("solforge-frames", os.MFD_CLOEXEC)
    os.ftruncate(fd, 2 * HALF_BYTES)
    return fd


class Area:
    """One direction's half of a worker's shared-memory file, mapped."""

    def __init__(self, fd: int, half: int, pin_reads: bool = False) -> None:
        """`pin_reads`: also page-lock what frames read (the worker's inputs, bound for its
        GPU). The driver never does: the offsets it reads come from the worker, which could
        name any page of the half and have the driver lock gigabytes."""
        self.size = HALF_BYTES
        self._pin_reads = pin_reads
        self._map = mmap.mmap(fd, HALF_BYTES, offset=half * HALF_BYTES)
        self.pinned = 0  # bytes of the prefix page-locked for the GPU
        self._pinnable = os.environ.get(PIN_ENV, "1") != "0"
        self._base: int | None = None  # the mapping's address, once pinning needs it

    def layout(self, sizes: list[int]) -> list[int] | None:
        """Offsets for tensors of these byte sizes, one after another; None if they do not fit."""
        offsets, end = aligned(sizes)
        return offsets if end <= self.size else None

    def write(self, offset: int, tensor: torch.Tensor) -> None:
        """Copy the tensor's bytes in (from the device directly, for a device tensor)."""
        flat = tensor.detach().reshape(-1).view(torch.uint8)
        if flat.numel():
            if flat.is_cuda:
                self.pin(offset + flat.numel())
            self.view(offset, flat.numel()).copy_(flat)

    def view(self, offset: int, size: int) -> torch.Tensor:
        """The bytes at [offset, offset + size) as a uint8 tensor over the shared memory: valid
        until the next frame in this direction, so a reader that keeps them copies them."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(f"bytes [{offset}, {offset + size}) outside the shared area")
        if self._pin_reads:
            self.pin(offset + size)
        return torch.frombuffer(self._map, dtype=torch.uint8, count=size, offset=offset)

    def pin(self, end: int) -> None:
        """Page-lock at least [0, end) if this process uses CUDA (a no-op otherwise, and once a
        registration was refused)."""
        if not self._pinnable or end <= self.pinned or not torch.cuda.is_initialized():
            return
        size = pinned_size(self.pinned, end, self.size)
        cudart = torch.cuda.cudart()
        if self.pinned:
            cudart.cudaHostUnregister(self._address())
        try:
            refused = int(cudart.cudaHostRegister(self._address(), size, 0)) != 0
        except Exception:  # a binding that cannot express the error: refused all the same
            refused = True
        if refused:
            self._pinnable, self.pinned = False, 0
            _clear_cuda_error()
            return
        self.pinned = size

    def unpin(self) -> None:
        """Release the page lock (before the mapping can go away with the last view of it)."""
        if self.pinned:
            self.pinned = 0
            torch.cuda.cudart().cudaHostUnregister(self._address())

    def _address(self) -> int:
        if self._base is None:
            self._base = torch.frombuffer(self._map, dtype=torch.uint8, count=1).data_ptr()
        return self._base

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit torch may be gone
            self.unpin()


def _clear_cuda_error() -> None:
    """A refused registration stays the CUDA runtime's last error, which PyTorch's next kernel
    launch check would raise as its own: read it once, from the runtime PyTorch loaded."""
    with contextlib.suppress(OSError, AttributeError):
        major = (torch.version.cuda or "").split(".")[0]
        ctypes.CDLL(f"libcudart.so.{major}").cudaGetLastError()
