"""GPU inputs handed from the driver to the worker through CUDA IPC, without a trip to the host.

On the CPU (and wherever IPC does not work) inputs travel as bytes in the INPUTS frame. On a GPU
that would cost two copies over PCIe and a pipe per call, seconds per call for the largest
workloads, so the driver shares each input's device memory with the worker instead: the frame
carries an IPC handle per tensor, the worker maps it, copies the tensor into memory of its own
(a device-to-device copy, before the call starts) and lets the mapping go.

An IPC handle maps the whole allocator segment the tensor lives in, so the driver never shares a
tensor of its own: it copies each input into a memory pool that holds nothing but these copies,
and computes its references from its private originals. Whatever the worker does to a mapped
segment reaches only the copies it is given anyway.

`probe_value` and `PROBE_SUM` let the driver check once per worker that the mapping works there
(the same GPU seen from two processes, a driver new enough); otherwise it falls back to bytes.
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.harness.channel import TENSOR_DTYPES

KIND = "cuda_ipc"
PROBE_ELEMENTS = 1024
PROBE_SUM = PROBE_ELEMENTS * (PROBE_ELEMENTS - 1) // 2  # sum of arange(PROBE_ELEMENTS)


class SharedInputs:
    """The driver's side: copies of its inputs in a pool of their own, shared by handle."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.MemPool()
        self.live: list[torch.Tensor] = []  # the copies of the call in flight

    def share(self, values: list[Any]) -> tuple[list[Any], list[dict[str, Any] | None]]:
        """(frame values, descriptions): device tensors become a placeholder 0 in the values
        and an IPC description in the list; everything else travels as is."""
        self.release()
        plain: list[Any] = []
        shared: list[dict[str, Any] | None] = []
        for value in values:
            if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                with torch.cuda.use_mem_pool(self.pool):
                    copy = value.detach().clone()
                self.live.append(copy)
                plain.append(0)  # a placeholder the worker replaces
                shared.append(describe(copy))
            else:
                plain.append(value)
                shared.append(None)
        return plain, shared

    def release(self) -> None:
        """Drop the copies of the previous call (the worker has copied them by now)."""
        self.live.clear()


def describe(tensor: torch.Tensor) -> dict[str, Any]:
    """A JSON description of a device tensor's IPC handle."""
    storage = tensor.untyped_storage()
    (device, handle, size_bytes, offset_bytes, counter_handle, counter_offset, event_handle,
     event_sync) = storage._share_cuda_()
    return {"kind": KIND, "dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": list(tensor.shape), "stride": list(tensor.stride()),
            "storage_offset": tensor.storage_offset(), "device": int(device),
            "handle": _hex(handle), "size_bytes": int(size_bytes),
            "offset_bytes": int(offset_bytes), "counter_handle": _hex(counter_handle),
            "counter_offset": int(counter_offset), "event_handle": _hex(event_handle),
            "event_sync": bool(event_sync)}


def open_shared(description: dict[str, Any], device: torch.device) -> torch.Tensor:
    """The worker's side: map a shared tensor and copy it into memory of its own."""
    if description.get("kind") != KIND or description.get("dtype") not in TENSOR_DTYPES:
        raise ValueError(f"not a shared tensor: {description!r:.200}")
    storage = torch.UntypedStorage._new_shared_cuda(
        description["device"], _bytes(description["handle"]), description["size_bytes"],
        description["offset_bytes"], _bytes(description["counter_handle"]),
        description["counter_offset"], _bytes(description["event_handle"]),
        description["event_sync"])
    dtype = TENSOR_DTYPES[description["dtype"]]
    mapped = torch.empty(0, dtype=dtype, device=storage.device)
    mapped.set_(storage, description["storage_offset"], description["shape"],
                description["stride"])
    own = mapped.to(device, copy=True)
    torch.cuda.current_stream(own.device).synchronize()  # copied before the mapping goes
    del mapped, storage
    return own


def receive_values(values: list[Any], shared: Any, device: torch.device) -> list[Any]:
    """The inputs of an INPUTS frame: shared ones opened, the rest as sent."""
    if shared is None:
        return values
    if not isinstance(shared, list) or len(shared) != len(values):
        raise ValueError("the shared-input descriptions do not match the values")
    return [open_shared(d, device) if d is not None else v for v, d in zip(values, shared)]


def probe_value(device: torch.device) -> torch.Tensor:
    return torch.arange(PROBE_ELEMENTS, dtype=torch.int64, device=device)


def _hex(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).hex()


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)
