"""The result channel between the candidate's process and the trusted driver.

A dedicated pipe, never stdout: the candidate's prints go to a bounded log that nobody parses.
Each frame is `magic | meta length | payload length | meta JSON | payload | HMAC-SHA256`, the MAC
keyed by a secret drawn per run and covering a sequence number, so a frame written by anything
but the harness (a forged "PASSED" line, a replayed or reordered frame, garbage on the file
descriptor) fails authentication and is reported as tampering. Tensors travel as raw bytes
described by dtype and shape; the reader computes every size itself and never unpickles
anything the candidate's process wrote. With a shared area (area.py), a frame's tensors lie
there instead of in the payload and the MAC covers their descriptions, not their bytes: the
worker maps the area, so a MAC over them would prove nothing the driver does not check anyway.

Limits of the defense: the key lives in the candidate's process, so code that digs through that
process's memory could forge frames. Little the driver trusts comes only from the channel,
though: it makes every input, takes every output when its call returns, computes every
reference and statistic itself, bounds each reported time by its own wall-clock bracket of the
call and holds every time to the speed-of-light floor.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import select
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.data.dtypes import DTYPES
from solforge.harness.area import Area

MAGIC = b"SFv1"
_HEADER = struct.Struct("<4sIQ")  # magic, meta bytes, payload bytes
MAC_BYTES = 32
MAX_META_BYTES = 1 << 20
_CHUNK = 1 << 20
_POLL_SECONDS = 0.2
TENSOR_DTYPES = {str(d.torch_dtype).removeprefix("torch."): d.torch_dtype
                 for d in DTYPES.values()}


class ChannelError(Exception):
    """The channel broke; subclasses say how."""


class ChannelClosed(ChannelError):
    """The writer went away (end of file) before a frame was complete."""


class ChannelTimeout(ChannelError):
    """No complete frame before the deadline."""


class ChannelForged(ChannelError):
    """A frame that the harness did not write: bad magic, sizes, MAC or sequence."""


@dataclass(frozen=True)
class Frame:
    kind: str
    meta: dict[str, Any]
    values: list[Any] = field(default_factory=list)  # tensors (CPU) and Python scalars


def encode_values(values: Sequence[Any], area: Area | None = None
                  ) -> tuple[list[dict[str, Any]], list[memoryview]]:
    """Descriptions for the meta and raw byte views for the payload; with `area`, the tensors
    are written there (when they fit) and the payload is empty."""
    placed = _place(values, area)
    if placed is not None:
        return placed, []
    descriptions: list[dict[str, Any]] = []
    chunks: list[memoryview] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            # A copy taken now, on the CPU too (where .cpu() is the tensor itself): what is
            # authenticated and sent is the value at this moment, whatever writes it later.
            host = value.detach().to("cpu", copy=True).contiguous()
            name = str(host.dtype).removeprefix("torch.")
            descriptions.append({"kind": "tensor", "dtype": name, "shape": list(host.shape)})
            chunks.append(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
        else:
            descriptions.append({"kind": "scalar", "value": value})
    return descriptions, chunks


def _place(values: Sequence[Any], area: Area | None) -> list[dict[str, Any]] | None:
    """The descriptions of values whose tensors were written into `area`; None when there is
    no area, no tensor, or the tensors do not fit."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if area is None or not tensors:
        return None
    offsets = area.layout([t.nelement() * t.element_size() for t in tensors])
    if offsets is None:
        return None
    at = iter(offsets)
    descriptions: list[dict[str, Any]] = []
    for value in values:
        if not isinstance(value, torch.Tensor):
            descriptions.append({"kind": "scalar", "value": value})
            continue
        offset = next(at)
        area.write(offset, value)
        descriptions.append({"kind": "tensor", "dtype": str(value.dtype).removeprefix("torch."),
                             "shape": list(value.shape), "at": offset})
    return descriptions


def decode_values(descriptions: Any, payload: bytearray, area: Area | None = None,
                  max_area_bytes: int = 1 << 36) -> list[Any]:
    """Rebuild the values from trusted sizes; any mismatch is a forged frame. Tensors that lie
    in `area` come back as views of it (a reader that keeps them copies them)."""
    if not isinstance(descriptions, list):
        raise ChannelForged("values description is not a list")
    values: list[Any] = []
    offset = 0
    in_area = 0
    for entry in descriptions:
        if not isinstance(entry, dict) or entry.get("kind") not in ("tensor", "scalar"):
            raise ChannelForged(f"malformed value description {entry!r:.200}")
        if entry["kind"] == "scalar":
            if not isinstance(entry.get("value"), (int, float, bool)):
                raise ChannelForged("scalar output is not a number")
            values.append(entry["value"])
            continue
        dtype, shape = _tensor_layout(entry)
        count = _numel(shape)
        size = count * _itemsize(dtype)
        if "at" in entry:
            in_area += size
            values.append(_from_area(entry["at"], size, dtype, shape, area,
                                     in_area <= max_area_bytes))
            continue
        if offset + size > len(payload):
            raise ChannelForged("payload shorter than its tensors")
        flat = torch.frombuffer(payload, dtype=torch.uint8, count=size, offset=offset)
        values.append(flat.view(dtype).reshape(shape) if size else
                      torch.empty(shape, dtype=dtype, device="cpu"))
        offset += size
    if offset != len(payload):
        raise ChannelForged("payload longer than its tensors")
    return values


def _from_area(at: Any, size: int, dtype: torch.dtype, shape: tuple[int, ...],
               area: Area | None, allowed: bool) -> torch.Tensor:
    if area is None or not isinstance(at, int) or isinstance(at, bool) or not allowed:
        raise ChannelForged("a tensor placed in a shared area that is not there, or beyond "
                            "any frame the harness writes")
    if size == 0:
        return torch.empty(shape, dtype=dtype)
    try:
        raw = area.view(at, size)
    except ValueError as exc:
        raise ChannelForged(str(exc)) from None
    return raw.view(dtype).reshape(shape)


def _tensor_layout(entry: dict[str, Any]) -> tuple[torch.dtype, tuple[int, ...]]:
    name, shape = entry.get("dtype"), entry.get("shape")
    if name not in TENSOR_DTYPES:
        raise ChannelForged(f"unknown tensor dtype {name!r:.50}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise ChannelForged("tensor shape is not a list of non-negative integers")
    return TENSOR_DTYPES[name], tuple(shape)


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="cpu").element_size()


class FrameWriter:
    def __init__(self, fd: int, key: bytes, area: Area | None = None) -> None:
        self.fd = fd
        self.key = key
        self.area = area  # where this direction's tensors go (None: in the payload)
        self.sequence = 0

    def send(self, kind: str, meta: dict[str, Any] | None = None,
             values: Sequence[Any] = ()) -> None:
        descriptions, chunks = encode_values(values, self.area)
        body = json.dumps({"kind": kind, "meta": meta or {}, "values": descriptions}).encode()
        header = _HEADER.pack(MAGIC, len(body), sum(c.nbytes for c in chunks))
        mac = hmac.new(self.key, struct.pack("<Q", self.sequence) + header, hashlib.sha256)
        mac.update(body)
        for chunk in chunks:
            mac.update(chunk)
        self._write(header)
        self._write(memoryview(body))
        for chunk in chunks:
            self._write(chunk)
        self._write(mac.digest())
        self.sequence += 1

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            written = os.write(self.fd, view[:_CHUNK])
            view = view[written:]


class FrameReader:
    """Reads frames with a deadline; `poll` runs whenever no data is waiting and may raise."""

    def __init__(self, fd: int, key: bytes, max_payload: int = 1 << 36,
                 area: Area | None = None) -> None:
        self.fd = fd
        self.key = key
        self.max_payload = max_payload  # tensor bytes of a frame, in its payload or its area
        self.area = area
        self.sequence = 0
        self._file = io.FileIO(fd, "rb", closefd=False)

    def receive(self, deadline: float, poll: Callable[[], None] = lambda: None) -> Frame:
        header = self._read_exact(_HEADER.size, deadline, poll, allow_eof=True)
        magic, meta_bytes, payload_bytes = _HEADER.unpack(header)
        if magic != MAGIC:
            raise ChannelForged(f"frame {self.sequence} does not start with the harness magic")
        if meta_bytes > MAX_META_BYTES or payload_bytes > self.max_payload:
            raise ChannelForged(f"frame {self.sequence} claims {meta_bytes} + {payload_bytes} "
                                "bytes, beyond any frame the harness writes")
        body = self._read_exact(meta_bytes, deadline, poll)
        payload = self._read_exact(payload_bytes, deadline, poll)
        mac = self._read_exact(MAC_BYTES, deadline, poll)
        expected = hmac.new(self.key, struct.pack("<Q", self.sequence) + bytes(header),
                            hashlib.sha256)
        expected.update(body)
        expected.update(payload)
        if not hmac.compare_digest(expected.digest(), bytes(mac)):
            raise ChannelForged(f"frame {self.sequence} fails authentication (forged, replayed "
                                "or reordered)")
        self.sequence += 1
        try:
            message = json.loads(bytes(body))
        except ValueError:
            raise ChannelForged("authenticated frame with unreadable JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise ChannelForged("authenticated frame without a kind")
        meta = message.get("meta") if isinstance(message.get("meta"), dict) else {}
        return Frame(message["kind"], meta, decode_values(message.get("values", []), payload,
                                                          self.area, self.max_payload))

    def _read_exact(self, count: int, deadline: float, poll: Callable[[], None],
                    allow_eof: bool = False) -> bytearray:
        buffer = bytearray(count)
        view = memoryview(buffer)
        filled = 0
        while filled < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout(f"no complete frame within the time limit "
                                     f"(frame {self.sequence})")
            ready, _, _ = select.select([self.fd], [], [], min(remaining, _POLL_SECONDS))
            if not ready:
                poll()
                continue
            got = self._file.readinto(view[filled:filled + _CHUNK])
            if not got:
                where = "between" if allow_eof and filled == 0 else "in the middle of"
                raise ChannelClosed(f"the result channel closed {where} frames "
                                    f"(after {self.sequence})")
            filled += got
        return buffer
