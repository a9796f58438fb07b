"""The CPU priority of compiles that run beside the judging.

On a GPU shared by several units, the timed loop holds the GPU alone (device_lock.py), and
most of its time is CPU work: the worker's guard check before each call, its timer's records,
the hand-over of inputs and outputs, the driver's frames. Those loops are the floor under the
time between results, and every process beside them competes for the same cores: the
optimizer's captures of the next candidates (Triton compiles, forge/capture.py) and the
torch.compile graphs compiled ahead for the baselines (compile_ahead.py). Those compiles
lower their own priority first, so they take the cores the judging leaves idle: they are
ahead of need, and a niced compile that is late only loses its head start.
"""

from __future__ import annotations

import contextlib
import os

from solforge.errors import SolforgeError

ENV = "SOLFORGE_COMPILE_NICE"  # the niceness a compile ahead takes (0: as its parent)
DEFAULT = 10
HIGHEST = 19  # the lowest priority Linux gives


def compile_nice() -> int:
    """The niceness compiles ahead add to their own (SOLFORGE_COMPILE_NICE, else DEFAULT); the
    parent that starts them asks first, so a bad value is refused before any child starts."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT
    if not text.isdigit() or int(text) > HIGHEST:
        raise SolforgeError(f"{ENV}={text!r}: give the niceness of compiles ahead as a whole "
                            f"number from 0 to {HIGHEST} (0: no change)")
    return int(text)


def lower_priority(increment: int | None = None) -> int:
    """Add `increment` (default: compile_nice()) to this process's niceness; its threads and
    children inherit it. The niceness now (unchanged where the system refuses)."""
    step = compile_nice() if increment is None else increment
    if step > 0:
        with contextlib.suppress(OSError):
            return os.nice(step)
    return os.nice(0)
