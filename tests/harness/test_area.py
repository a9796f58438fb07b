"""The frames' shared area: tensors of a frame travel in shared memory, the pipe carries their
descriptions, and a reader refuses a description that points outside the area."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import time

import pytest
import torch

from solforge.harness.area import HALF_BYTES, TO_DRIVER, TO_WORKER, Area, create
from solforge.harness.channel import _HEADER, MAGIC, ChannelForged, FrameReader, FrameWriter
from solforge.problem.inputs import pack_fp4

KEY = b"k" * 32


@pytest.fixture
def linked():
    """A writer and a reader sharing one area, as the driver and a worker do."""
    fd = create()
    read_fd, write_fd = os.pipe()
    writer = FrameWriter(write_fd, KEY, Area(fd, TO_WORKER))
    reader = FrameReader(read_fd, KEY, area=Area(fd, TO_WORKER))
    yield writer, reader
    for descriptor in (fd, read_fd, write_fd):
        os.close(descriptor)


def test_tensors_travel_through_the_area_bit_exactly(linked):
    writer, reader = linked
    values = [torch.randn(3, 5).bfloat16(), pack_fp4(torch.randn(2, 8)), torch.tensor(True),
              torch.randn(2, 3).t(), torch.zeros(0, 4), 1.5]
    writer.send("inputs", {"index": 0}, values)
    frame = reader.receive(time.monotonic() + 5)
    for sent, got in zip(values[:-1], frame.values[:-1]):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert torch.equal(got.reshape(-1).view(torch.uint8),
                           sent.contiguous().reshape(-1).view(torch.uint8))
    assert frame.values[-1] == 1.5


def test_the_pipe_carries_no_tensor_bytes_when_an_area_is_there(linked):
    writer, reader = linked
    big = torch.ones(1 << 20)  # 4 MiB
    writer.send("inputs", {}, [big])
    header = os.read(reader.fd, 16)
    assert int.from_bytes(header[8:16], "little") == 0  # the payload length


def test_the_two_halves_do_not_overlap():
    fd = create()
    try:
        Area(fd, TO_WORKER).write(0, torch.full((4,), 7, dtype=torch.uint8))
        assert Area(fd, TO_DRIVER).view(0, 4).tolist() == [0, 0, 0, 0]
    finally:
        os.close(fd)


def test_a_description_outside_the_area_is_forged(linked):
    writer, reader = linked
    body = {"kind": "round", "meta": {}, "values": [
        {"kind": "tensor", "dtype": "float32", "shape": [4], "at": HALF_BYTES - 8}]}
    _send_raw(writer, body)
    with pytest.raises(ChannelForged, match="outside the shared area"):
        reader.receive(time.monotonic() + 5)


def test_area_tensors_count_against_the_frame_limit(linked):
    writer, reader = linked
    reader.max_payload = 16
    writer.send("round", {}, [torch.zeros(100)])
    with pytest.raises(ChannelForged, match="beyond any frame"):
        reader.receive(time.monotonic() + 5)


def test_a_frame_placed_in_an_area_the_reader_lacks_is_forged():
    fd = create()
    read_fd, write_fd = os.pipe()
    try:
        FrameWriter(write_fd, KEY, Area(fd, TO_WORKER)).send("round", {}, [torch.zeros(4)])
        with pytest.raises(ChannelForged, match="not there"):
            FrameReader(read_fd, KEY).receive(time.monotonic() + 5)
    finally:
        for descriptor in (fd, read_fd, write_fd):
            os.close(descriptor)


def _send_raw(writer: FrameWriter, body: dict) -> None:
    """A correctly authenticated frame with a hand-written description (what a worker that
    holds the key could send)."""
    encoded = json.dumps(body).encode()
    header = _HEADER.pack(MAGIC, len(encoded), 0)
    mac = hmac.new(writer.key, struct.pack("<Q", writer.sequence) + header + encoded,
                   hashlib.sha256).digest()
    os.write(writer.fd, header + encoded + mac)
    writer.sequence += 1
