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

from solforge.harness.area import (
    HALF_BYTES,
    PIN_STEP,
    TO_DRIVER,
    TO_WORKER,
    Area,
    create,
    pinned_size,
)
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


def test_the_page_locked_prefix_grows_by_doubling_in_whole_steps():
    assert pinned_size(0, 0, HALF_BYTES) == 0
    assert pinned_size(0, 1000, HALF_BYTES) == PIN_STEP
    assert pinned_size(PIN_STEP, PIN_STEP, HALF_BYTES) == PIN_STEP  # covered: unchanged
    assert pinned_size(PIN_STEP, PIN_STEP + 1, HALF_BYTES) == 2 * PIN_STEP
    assert pinned_size(2 * PIN_STEP, 5 * PIN_STEP + 7, HALF_BYTES) == 6 * PIN_STEP
    assert pinned_size(HALF_BYTES // 2 + PIN_STEP, HALF_BYTES, HALF_BYTES) == HALF_BYTES


def test_nothing_is_page_locked_in_a_process_without_cuda():
    fd = create()
    try:
        area = Area(fd, TO_WORKER, pin_reads=True)
        area.write(0, torch.arange(1000))
        assert torch.equal(area.view(0, 8000).view(torch.int64), torch.arange(1000))
        assert area.pinned == 0
    finally:
        os.close(fd)


@pytest.mark.gpu
def test_a_gpu_process_page_locks_what_it_writes_and_reads(monkeypatch):
    fd = create()
    try:
        driver, worker = Area(fd, TO_WORKER), Area(fd, TO_WORKER, pin_reads=True)
        sent = torch.randn(3 << 20, device="cuda")  # 12 MiB
        driver.write(0, sent)
        assert driver.pinned == PIN_STEP and driver.view(0, 16).is_pinned()
        received = worker.view(0, sent.numel() * 4).view(torch.float32)
        assert worker.pinned == PIN_STEP and torch.equal(received.cuda(), sent)
        big = torch.ones(20 << 20, device="cuda")  # 80 MiB: the prefix grows
        driver.write(0, big)
        assert driver.pinned == 2 * PIN_STEP
        driver.unpin()
        assert driver.pinned == 0 and not driver.view(0, 16).is_pinned()
        monkeypatch.setenv("SOLFORGE_PIN_AREA", "0")
        pageable = Area(fd, TO_DRIVER)
        pageable.write(0, sent)
        assert pageable.pinned == 0 and torch.equal(pageable.view(0, 48).view(torch.float32),
                                                    sent[:12].cpu())
        worker.unpin()
    finally:
        os.close(fd)


def test_the_largest_calls_of_the_suite_fit_the_area():
    """A call that does not fit goes through the pipe and its MAC, about 0.3 s per 64 MiB:
    a decode call of 4 GiB and 512 KiB (two 2 GiB caches and a query) timed out so. The suite's
    largest needs 21.1 GiB of inputs (l2/moe_block_deepseek_v3) and 8.0 GiB of outputs. The
    file is sparse: laying the tensors out touches no memory."""
    fd = create()
    try:
        inputs, outputs = Area(fd, TO_WORKER), Area(fd, TO_DRIVER)
        assert inputs.layout([2 << 30, 2 << 30, 512 << 10]) is not None
        assert inputs.layout([int(21.2 * (1 << 30))]) is not None
        assert outputs.layout([8 << 30]) is not None
    finally:
        os.close(fd)
