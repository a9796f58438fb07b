"""Where a worker's start goes: marks the worker sets as it starts, and the driver's share of them.

A worker's READY can take seconds (interpreter, `import torch`, the CUDA context, the profiler),
and the driver sees only the wait. So the worker marks the end of each step of its start with
`time.monotonic()`, a clock every process of the machine shares, and sends the marks with its
READY. The driver clips each step to the span it waited (a pre-spawned worker did its first steps
before anyone waited for it) and charges it to `start_<step>`, carved out of `worker_wait`.

The marks are a diagnostic for the phase table: a candidate, imported before READY, could rewrite
them, and the driver uses them for nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

_MARKS: list[tuple[str, float]] = []  # (step, monotonic end) in the order they happened
MAX_MARKS = 16  # a worker's start makes 12 (13 when its compile warm-up falls back)


def mark(step: str) -> None:
    """The step `step` of this worker's start ended now."""
    _MARKS.append((step, time.monotonic()))


def marks() -> list[list[object]]:
    """The marks, as READY's meta carries them."""
    return [[step, end] for step, end in _MARKS]


def waited_steps(raw: object, spawned: float, waited: tuple[float, float]) -> dict[str, float]:
    """Seconds of each step inside `waited` (the driver's monotonic span from its wait's start
    to READY). A step runs from the previous mark (the first, from `spawned`) to its own; a
    step seen twice adds up. Malformed marks give nothing: a mark that is not a short name and
    a number, or more marks than a start makes (the candidate, imported before READY, could
    have rewritten them; they can at most share out the span waited)."""
    steps: dict[str, float] = {}
    start = spawned
    entries = raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ()
    if len(entries) > MAX_MARKS:
        return {}
    for entry in entries:
        if not (isinstance(entry, Sequence) and len(entry) == 2 and isinstance(entry[0], str)
                and entry[0].isidentifier() and len(entry[0]) <= 32
                and isinstance(entry[1], (int, float))):
            return {}
        end = float(entry[1])
        overlap = min(end, waited[1]) - max(start, waited[0])
        if overlap > 0:
            steps[entry[0]] = steps.get(entry[0], 0.0) + overlap
        start = max(start, end)
    return steps
