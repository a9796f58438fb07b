"""GPU inputs and outputs passed between the driver and the worker through CUDA IPC, without a
trip to the host.

On the CPU (and wherever IPC does not work) inputs and outputs travel as bytes in the frames. On
a GPU that would cost two copies over PCIe, a pipe and a MAC over every byte per call, about
0.1 s per call for a 64 MiB output, so the driver shares device memory with the worker instead:
- inputs: the INPUTS frame carries an IPC handle per tensor; the worker maps it, copies the
  tensor into memory of its own (a device-to-device copy, before the call starts) and lets the
  mapping go;
- outputs: per workload the driver allocates one output slot per tensor output (START carries
  their handles); the moment a call returns, the worker copies its outputs into the slots, waits
  for the copy and says so. The driver copies a slot into private memory before it hands over
  the next call's inputs, and only for the calls it compares; the slots are overwritten by the
  next call, so what the driver compares is what the worker committed at that call's return.

An IPC handle maps the whole allocator segment the tensor lives in, so the driver never shares a
tensor of its own: it copies each input into a memory pool that holds nothing but these copies,
and computes its references from its private originals. Whatever the worker does to a mapped
segment reaches only the copies it is given anyway, and the slots it writes by design.

`probe_value` and `PROBE_SUM` let the driver check once per worker that the mapping works there,
reading and writing (the same GPU seen from two processes, a driver new enough); otherwise it
falls back to bytes.

A worker under the sandbox's private uid cannot map an IPC handle; there the same roles are
played by arenas the driver shares by file descriptor (vmm.py), and `map_shared` maps a
description of either kind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from solforge.harness import vmm
from solforge.harness.channel import TENSOR_DTYPES

KIND = "cuda_ipc"
_ARENAS: vmm.FdMapped | None = None  # the worker's mappings of its driver's VMM arenas
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

    def output_slots(self, layouts: list[tuple[tuple[int, ...], torch.dtype] | None]
                     ) -> tuple[list[torch.Tensor | None], list[dict[str, Any] | None]]:
        """(slots, descriptions): driver-owned memory in the shared pool for each tensor output
        (None for a number, or an empty tensor: those travel in the frame)."""
        torch.cuda.ipc_collect()  # free earlier slots once no worker maps them any more
        slots: list[torch.Tensor | None] = []
        for layout in layouts:
            if layout is None or math.prod(layout[0]) == 0:
                slots.append(None)
                continue
            with torch.cuda.use_mem_pool(self.pool):
                slots.append(torch.empty(layout[0], dtype=layout[1], device=self.device))
        return slots, [None if slot is None else describe(slot) for slot in slots]


def taken(values: list[Any], slots: list[torch.Tensor | None]) -> list[Any]:
    """The driver's private copies of a call's outputs: each slot copied out (into memory the
    worker cannot map), everything else as sent; complete before the next call can start."""
    if len(values) != len(slots):
        raise ValueError(f"{len(values)} outputs arrived for {len(slots)} slots")
    copies = [value if slot is None else slot.clone() for value, slot in zip(values, slots)]
    _wait(slots)
    return copies


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
    mapped = map_shared(description)
    own = mapped.to(device, copy=True)
    torch.cuda.current_stream(own.device).synchronize()  # copied before the mapping goes
    del mapped
    return own


def use_arenas(arenas: vmm.FdMapped) -> None:
    """The worker's side: where tensors of kind vmm.KIND are mapped from."""
    global _ARENAS
    _ARENAS = arenas


def map_shared(description: dict[str, Any]) -> torch.Tensor:
    """The worker's side: a tensor over the driver's shared memory (writes reach the driver):
    a CUDA IPC handle, or a place in an arena the driver sent by descriptor (vmm.py)."""
    if description.get("kind") == vmm.KIND and _ARENAS is not None:
        return _ARENAS.view(description)
    if description.get("kind") != KIND or description.get("dtype") not in TENSOR_DTYPES:
        raise ValueError(f"not a shared tensor: {description!r:.200}")
    torch.cuda.init()  # mapping a handle in a process with no CUDA context crashes it
    storage = torch.UntypedStorage._new_shared_cuda(
        description["device"], _bytes(description["handle"]), description["size_bytes"],
        description["offset_bytes"], _bytes(description["counter_handle"]),
        description["counter_offset"], _bytes(description["event_handle"]),
        description["event_sync"])
    dtype = TENSOR_DTYPES[description["dtype"]]
    mapped = torch.empty(0, dtype=dtype, device=storage.device)
    mapped.set_(storage, description["storage_offset"], description["shape"],
                description["stride"])
    return mapped


class OutputSlots:
    """The worker's side of the output slots of one workload."""

    def __init__(self, tensors: tuple[torch.Tensor | None, ...]) -> None:
        self.tensors = tensors

    @classmethod
    def mapped(cls, descriptions: Any, count: int) -> OutputSlots:
        """The slots START (or PROBE) describes, one per output, mapped."""
        if not isinstance(descriptions, list) or len(descriptions) != count:
            raise ValueError("the output slots do not match the outputs")
        return cls(tuple(None if d is None else map_shared(d) for d in descriptions))

    def fill(self, values: list[Any]) -> list[Any]:
        """Copy each tensor output into its slot (waited for: the driver may read it as soon as
        it hears of it); what the frame carries instead: 0 for a slotted value."""
        sent: list[Any] = []
        for value, slot in zip(values, self.tensors, strict=True):
            if slot is None:
                sent.append(value)
                continue
            if (type(value) is not torch.Tensor or value.shape != slot.shape
                    or value.dtype != slot.dtype):
                raise ValueError(f"an output does not fit its slot {tuple(slot.shape)} "
                                 f"{slot.dtype}")
            slot.copy_(value)
            sent.append(0)
        _wait(self.tensors)
        return sent

    def close(self) -> None:
        """Let the mappings go (the driver's memory is freed once no process maps it)."""
        self.tensors = ()


def receive_values(values: list[Any], shared: Any, device: torch.device) -> list[Any]:
    """The inputs of an INPUTS frame: shared ones opened, the rest as sent."""
    if shared is None:
        return values
    if not isinstance(shared, list) or len(shared) != len(values):
        raise ValueError("the shared-input descriptions do not match the values")
    return [open_shared(d, device) if d is not None else v for v, d in zip(values, shared)]


def _wait(tensors: Iterable[torch.Tensor | None]) -> None:
    """Until the device work on these tensors' device is done (nothing to wait for on a CPU)."""
    devices = {t.device for t in tensors if t is not None and t.device.type == "cuda"}
    for device in devices:
        torch.cuda.synchronize(device)


def probe_value(device: torch.device) -> torch.Tensor:
    return torch.arange(PROBE_ELEMENTS, dtype=torch.int64, device=device)


def probe_slot(device: torch.device) -> tuple[tuple[int, ...], torch.dtype]:
    """The layout of the slot the worker writes the probe's sum into."""
    return (1,), torch.int64


def _hex(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).hex()


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)
