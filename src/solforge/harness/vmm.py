"""Device memory the driver shares with its worker through a file descriptor (CUDA VMM).

Legacy CUDA IPC handles do not map across the sandbox's private uid (measured on the H200: the
importer must be allowed to reach into the exporter's process), so every call's inputs went to
the host and back. A CUDA VMM allocation made with a POSIX file-descriptor handle
(`cuMemCreate`, `cuMemExportToShareableHandle`) is shared by passing that descriptor over a
Unix socket (SCM_RIGHTS): whoever holds it can map the memory, whatever its uid. Each worker
gets one end of a socket pair at spawn (pool.py); the driver sends an arena's descriptor there
before the first frame that names it, and the worker maps it when a frame does.

An arena holds one role's data: the inputs of the call in flight, or a workload's output slots.
When a role needs more room the driver makes a bigger arena (at least double) and sends it; the
worker lets the older one of that role go. What the worker may do to an arena is what it may do
to CUDA IPC's shared pool (handover.py): it copies its inputs out before each call starts, the
driver writes a call's inputs only when that call starts and copies a slot out the moment the
frame arrives, and the driver's own inputs and references never live in an arena.

`HostArena` is the same thing over a host memfd, so the protocol runs in the CPU tests; the
CUDA calls themselves run only on a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import mmap
import os
import select
import socket
import time
from typing import Any, Protocol

import torch

from solforge.harness.area import aligned
from solforge.harness.channel import TENSOR_DTYPES

KIND = "cuda_vmm"
_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_MESSAGE_BYTES = 512


class VmmError(RuntimeError):
    """A CUDA driver call of this module failed; the frames carry the tensors instead."""


class Arena(Protocol):
    size: int

    def tensor(self) -> torch.Tensor: ...
    def share_fd(self) -> int: ...
    def close(self) -> None: ...


# -- CUDA VMM through the driver API (ctypes: the layouts of cuda.h, 64-bit Linux) ------------

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp: 32 bytes
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc: 12 bytes
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_LIBCUDA: ctypes.CDLL | None = None


def _cuda() -> ctypes.CDLL:
    global _LIBCUDA
    if _LIBCUDA is None:
        _LIBCUDA = ctypes.CDLL("libcuda.so.1")
    return _LIBCUDA


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise VmmError(f"{what}: {(name.value or b'CUDA error').decode()} ({result})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location.type, prop.location.id = _ON_DEVICE, device
    return prop


class _CudaInterface:
    """What torch.as_tensor reads to view device memory it does not own (keeps the arena)."""

    def __init__(self, arena: CudaArena) -> None:
        self.arena = arena
        self.__cuda_array_interface__ = {"shape": (arena.size,), "typestr": "|u1",
                                         "data": (arena.pointer, False), "version": 2}


class CudaArena:
    """`size` bytes of one GPU's memory mapped here, exportable as a file descriptor."""

    def __init__(self, device: torch.device, size: int, fd: int | None = None) -> None:
        """A new allocation (`fd` None), or the one whose descriptor another process sent."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.init()
        torch.cuda.synchronize(index)  # the primary context made current on this thread
        cuda, prop = _cuda(), _prop(index)
        granularity = ctypes.c_size_t()
        _check(cuda.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop),
                                                  0), "cuMemGetAllocationGranularity")
        self.device, self.size = torch.device("cuda", index), _round_up(size, granularity.value)
        self.handle = ctypes.c_ulonglong()
        if fd is None:
            _check(cuda.cuMemCreate(ctypes.byref(self.handle), ctypes.c_size_t(self.size),
                                    ctypes.byref(prop), ctypes.c_ulonglong(0)), "cuMemCreate")
        else:
            _check(cuda.cuMemImportFromShareableHandle(
                ctypes.byref(self.handle), ctypes.c_void_p(fd), _POSIX_FD),
                "cuMemImportFromShareableHandle")
        self._pointer = ctypes.c_ulonglong()
        _check(cuda.cuMemAddressReserve(ctypes.byref(self._pointer), ctypes.c_size_t(self.size),
                                        ctypes.c_size_t(0), ctypes.c_ulonglong(0),
                                        ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        _check(cuda.cuMemMap(self._pointer, ctypes.c_size_t(self.size), ctypes.c_size_t(0),
                             self.handle, ctypes.c_ulonglong(0)), "cuMemMap")
        access = _AccessDesc()
        access.location.type, access.location.id, access.flags = _ON_DEVICE, index, _READ_WRITE
        _check(cuda.cuMemSetAccess(self._pointer, ctypes.c_size_t(self.size),
                                   ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
        self._tensor: torch.Tensor | None = None

    @property
    def pointer(self) -> int:
        return self._pointer.value

    def tensor(self) -> torch.Tensor:
        if self._tensor is None:
            self._tensor = torch.as_tensor(_CudaInterface(self), device=self.device)
        return self._tensor

    def share_fd(self) -> int:
        """A new descriptor of the allocation, for another process (the caller closes it)."""
        fd = ctypes.c_int(-1)
        _check(_cuda().cuMemExportToShareableHandle(ctypes.byref(fd), self.handle, _POSIX_FD,
                                                    ctypes.c_ulonglong(0)),
               "cuMemExportToShareableHandle")
        return fd.value

    def close(self) -> None:
        """Unmap and drop this process's handle (the memory goes once no process maps it)."""
        if self._pointer.value:
            self._tensor = None
            torch.cuda.synchronize(self.device)
            cuda = _cuda()
            cuda.cuMemUnmap(self._pointer, ctypes.c_size_t(self.size))
            cuda.cuMemAddressFree(self._pointer, ctypes.c_size_t(self.size))
            cuda.cuMemRelease(self.handle)
            self._pointer = ctypes.c_ulonglong(0)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit torch may be gone
            self.close()


class HostArena:
    """The same over a host memfd: what the CPU tests run the protocol on."""

    def __init__(self, device: torch.device, size: int, fd: int | None = None) -> None:
        self.device, self.size = device, _round_up(size, mmap.PAGESIZE)
        if fd is None:
            fd = os.memfd_create("solforge-arena", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.size)
        else:
            fd = os.dup(fd)
        self._fd = fd
        self._map = mmap.mmap(fd, self.size)

    def tensor(self) -> torch.Tensor:
        return torch.frombuffer(self._map, dtype=torch.uint8, count=self.size)

    def share_fd(self) -> int:
        return os.dup(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def make_arena(device: torch.device, size: int, fd: int | None = None) -> Arena:
    return CudaArena(device, size, fd) if device.type == "cuda" else HostArena(device, size, fd)


def _round_up(size: int, step: int) -> int:
    return max(step, -(-size // step) * step)


def span_bytes(tensor: torch.Tensor) -> int:
    """The bytes a strided tensor's elements cover (0 when it has none)."""
    if tensor.numel() == 0:
        return 0
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return (last + 1) * tensor.element_size()


# -- the driver's side -------------------------------------------------------------------------

class FdShared:
    """The driver's arenas of one worker (an inputs arena and an output-slots arena), with the
    interface of handover.SharedInputs."""

    def __init__(self, device: torch.device, link: socket.socket) -> None:
        self.device = device
        self.link = link
        self.arenas: dict[str, tuple[int, Arena]] = {}  # role -> (its id, the arena)
        self.next_id = 0

    def share(self, values: list[Any]) -> tuple[list[Any], list[dict[str, Any] | None]]:
        """(frame values, descriptions): each device tensor copied into the inputs arena (its
        strides kept) becomes a placeholder 0 and a description; the rest travels as is."""
        values = [_without_overlap(v) if self._ours(v) else v for v in values]
        tensors = [v for v in values if self._ours(v)]
        if not tensors:
            return list(values), [None] * len(values)
        offsets, end = aligned([span_bytes(t) for t in tensors])
        ident, flat = self._room("inputs", end)
        plain: list[Any] = []
        described: list[dict[str, Any] | None] = []
        place = iter(offsets)
        for value in values:
            if not self._ours(value):
                plain.append(value)
                described.append(None)
                continue
            offset = next(place)
            _view(flat, offset, value.dtype, value.shape, value.stride()).copy_(value)
            plain.append(0)
            described.append(_describe(ident, offset, value))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # in the arena before the worker hears of it
        return plain, described

    def _ours(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.device.type == self.device.type

    def release(self) -> None:
        """Nothing to drop: the next call's inputs overwrite this call's."""

    def output_slots(self, layouts: list[tuple[tuple[int, ...], torch.dtype] | None]
                     ) -> tuple[list[torch.Tensor | None], list[dict[str, Any] | None]]:
        """(slots, descriptions): contiguous slots in the slots arena, one per tensor output
        (None for a number, or an empty tensor: those travel in the frame)."""
        sizes = [0 if layout is None else math.prod(layout[0]) * _itemsize(layout[1])
                 for layout in layouts]
        if not any(sizes):
            return [None] * len(layouts), [None] * len(layouts)
        offsets, end = aligned(sizes)
        ident, flat = self._room("slots", end)
        slots: list[torch.Tensor | None] = []
        described: list[dict[str, Any] | None] = []
        for layout, size, offset in zip(layouts, sizes, offsets):
            if layout is None or size == 0:
                slots.append(None)
                described.append(None)
                continue
            shape, dtype = layout
            stride = torch.empty(shape, dtype=dtype, device="meta").stride()
            slot = _view(flat, offset, dtype, shape, stride)
            slots.append(slot)
            described.append(_describe(ident, offset, slot))
        return slots, described

    def close(self) -> None:
        for _, arena in self.arenas.values():
            arena.close()
        self.arenas.clear()

    def _room(self, role: str, needed: int) -> tuple[int, torch.Tensor]:
        """The role's arena, replaced by one at least twice as large when it is too small; the
        worker is sent a new arena's descriptor before any frame names it."""
        held = self.arenas.get(role)
        if held is None or held[1].size < needed:
            size = max(needed, 2 * held[1].size if held else 0, 1 << 20)
            arena = make_arena(self.device, size)
            ident, self.next_id = self.next_id, self.next_id + 1
            fd = arena.share_fd()
            try:
                message = json.dumps({"arena": ident, "role": role, "size": arena.size})
                socket.send_fds(self.link, [message.encode()], [fd])
            finally:
                os.close(fd)
            if held is not None:
                held[1].close()  # the worker lets its mapping go when the new one arrives
            self.arenas[role] = held = (ident, arena)
        return held[0], held[1].tensor()


def _without_overlap(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor whose elements share memory (an expanded one) as a contiguous copy, as clone()
    gives it for CUDA IPC; any other keeps its strides. The test: taken by increasing stride,
    each dimension must step past all the elements of the ones before it."""
    reach = 1
    for stride, size in sorted((s, n) for n, s in zip(tensor.shape, tensor.stride()) if n > 1):
        if stride < reach:
            return tensor.contiguous()
        reach = stride * size
    return tensor


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _view(flat: torch.Tensor, offset: int, dtype: torch.dtype, shape: Any, stride: Any
          ) -> torch.Tensor:
    """The strided tensor of `dtype` whose first element sits `offset` bytes into `flat`."""
    itemsize = _itemsize(dtype)
    count = max(1, (flat.numel() - offset) // itemsize)
    typed = flat[offset:offset + count * itemsize].view(dtype)
    return typed.as_strided(tuple(shape), tuple(stride))


def _describe(ident: int, offset: int, tensor: torch.Tensor) -> dict[str, Any]:
    return {"kind": KIND, "arena": ident, "offset": offset,
            "dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
            "stride": list(tensor.stride())}


# -- the worker's side -------------------------------------------------------------------------

class FdMapped:
    """The worker's mappings of the arenas its driver sent over `link`."""

    def __init__(self, link: socket.socket, device: torch.device,
                 timeout_s: float = 30.0) -> None:
        self.link, self.device, self.timeout_s = link, device, timeout_s
        self.arenas: dict[int, Arena] = {}
        self.roles: dict[str, int] = {}

    def view(self, description: dict[str, Any]) -> torch.Tensor:
        """The tensor a description names (writes reach the driver's arena)."""
        if description.get("dtype") not in TENSOR_DTYPES:
            raise ValueError(f"not a shared tensor: {description!r:.200}")
        ident = description.get("arena")
        deadline = time.monotonic() + self.timeout_s
        while ident not in self.arenas:  # sent before the frame: it is waiting in the socket
            self._receive(deadline)
        flat = self.arenas[ident].tensor()
        dtype = TENSOR_DTYPES[description["dtype"]]
        shape, stride, offset = description["shape"], description["stride"], description["offset"]
        if not (isinstance(shape, list) and isinstance(stride, list)
                and len(shape) == len(stride)
                and all(isinstance(n, int) and n >= 0 for n in [offset, *shape, *stride])):
            raise ValueError(f"not a tensor's place: {description!r:.200}")
        empty = 0 in shape
        last = 0 if empty else sum((n - 1) * s for n, s in zip(shape, stride))
        if offset + (0 if empty else (last + 1) * _itemsize(dtype)) > flat.numel():
            raise ValueError(f"a tensor past the end of arena {ident}")
        return _view(flat, offset, dtype, shape, stride)

    def _receive(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.link], [], [], left)[0]:
            raise TimeoutError("the driver's arena did not arrive")
        message, fds, _, _ = socket.recv_fds(self.link, _MESSAGE_BYTES, 1)
        if not fds:
            raise ConnectionError("the driver's socket closed")
        try:
            meta = json.loads(message)
            arena = make_arena(self.device, int(meta["size"]), fds[0])
        finally:
            for fd in fds:
                os.close(fd)
        older = self.roles.get(meta["role"])
        if older is not None:
            self.arenas.pop(older).close()
        self.arenas[int(meta["arena"])] = arena
        self.roles[meta["role"]] = int(meta["arena"])


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the driver's end, the worker's end) of the arenas' channel."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def adopt(fd: int) -> socket.socket:
    """The worker's end, from the descriptor it inherited."""
    return socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd)

