"""Output slots, the logic both sides share (the CUDA IPC mapping itself is tested on a GPU in
test_harness.py): the worker copies each tensor output into its slot and sends a placeholder;
the driver copies the slots out into memory of its own."""

from __future__ import annotations

import pytest
import torch

from solforge.harness.handover import OutputSlots, taken


def test_a_filled_slot_holds_the_output_and_the_frame_a_placeholder():
    slot = torch.zeros(4, 3)
    slots = OutputSlots((slot, None))
    output = torch.arange(12.0).reshape(4, 3)
    assert slots.fill([output, 0.5]) == [0, 0.5]
    assert torch.equal(slot, output)


def test_the_driver_takes_a_private_copy_of_each_slot():
    slot = torch.full((2, 2), 3.0)
    copies = taken([0, 9], [slot, None])
    slot.fill_(-1.0)  # the next call overwrites the slot; the copy taken stays
    assert copies[1] == 9 and torch.equal(copies[0], torch.full((2, 2), 3.0))


def test_outputs_that_do_not_match_the_slots_are_refused():
    with pytest.raises(ValueError, match="1 outputs arrived for 2 slots"):
        taken([0], [torch.zeros(1), None])
    with pytest.raises(ValueError, match="do not match"):
        OutputSlots.mapped([None], 2)
    with pytest.raises(ValueError):
        OutputSlots((torch.zeros(1),)).fill([torch.zeros(1), 2])


def test_an_output_of_another_shape_or_dtype_is_not_filled_into_a_slot():
    for wrong in (torch.zeros(1, 3), torch.zeros(3, dtype=torch.float64)):  # would broadcast
        with pytest.raises(ValueError, match="does not fit its slot"):
            OutputSlots((torch.zeros(4, 3),)).fill([wrong])
