"""Work through items in order until a wall-clock budget would be overrun.

The device machine allows about ten minutes a command, so a long pass (1,100 shapes) is cut into
calls that each stop cleanly before their limit. Before each item the loop asks: does the time
spent so far plus this item's estimate, scaled by how the estimates have compared with the
measured times of the items done in this call, still fit? If not it stops, and says how long the
rest should take at the same calibrated rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

Item = TypeVar("Item")

# Working figures for the device time of one shape on the H200 (a fixed cost per shape: operands,
# reference, plans, profiler sessions; a cost per timed call: L2 flush of 2 x 120 MB, launch,
# synchronize or graph capture; and the GEMM work itself), to be replaced by what the first
# calls measure: the loop below rescales them by the measured-to-estimated ratio as it goes.
SHAPE_OVERHEAD_S = 0.15  # the H200 run of 2026-12-01: 0.1 s to tune and 0.1 s to bench a shape
CALL_OVERHEAD_S = 150e-6
SUSTAINED_FLOPS = 6e14  # half-precision GEMMs, any method
REFERENCE_FLOPS = 5e13  # float32 without TF32 (the H200's 51 TFLOP/s)


@dataclass(frozen=True)
class BudgetReport:
    done: int
    remaining: int
    seconds: float
    remaining_estimate_s: float  # the rest, at this call's measured-to-estimated rate
    stopped_by_budget: bool


def run_budgeted(items: Sequence[Item], work: Callable[[Item], None],
                 estimate: Callable[[Item], float], budget_s: float,
                 clock: Callable[[], float] = time.monotonic) -> BudgetReport:
    began = clock()
    measured = estimated = 0.0
    done = 0
    for item in items:
        scale = measured / estimated if estimated else 1.0
        if clock() - began + scale * estimate(item) > budget_s:
            break
        item_began = clock()
        work(item)
        measured += clock() - item_began
        estimated += estimate(item)
        done += 1
    rest = items[done:]
    scale = measured / estimated if estimated else 1.0
    return BudgetReport(done, len(rest), clock() - began,
                        scale * sum(estimate(item) for item in rest), bool(rest))
