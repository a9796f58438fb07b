"""What the driver and the candidate's process say to each other, and in which order.

The driver leads; the worker never holds the plan. First

    driver                                    worker
    CONFIG {key, solution, ...}        ->
                                       <-     READY {import_seconds}

then, once, on a GPU:

    PROBE {shared, slots}              ->     (can this worker map CUDA IPC and write a slot?)
                                       <-     PROBED {sum | error}

then per workload:

    START {workload, rounds, slots}    ->     (slots: where tensor outputs go, on a GPU)
    INPUTS {round r} + inputs          ->                                    (per round)
                                       <-     ROUND {round} + outputs
                                       <-     ROUNDS_DONE {first_call_ms}
    TIME (rounds correct) | SKIP       ->
                                       <-     SKIPPED (after SKIP: no late write was seen)
    INPUTS {call i} + inputs           ->                                    (per call,
                                       <-     CALL_OUTPUT {iteration i} + outputs  warm-up
                                                                             and timed alike)
                                       <-     TIMING {raw times, clocks}
                                       <-     WORKLOAD_DONE
    ... next workload ...; when none is left the driver kills the worker's process group.

With slots (handover.py) a ROUND or CALL_OUTPUT frame carries 0 for each slotted output, which
the worker has copied into the driver's slot before sending it.

The driver makes every input and sends a call's inputs only after it holds the previous call's
outputs, so the worker never holds the inputs of a call before that call starts, and never
holds an output the driver has not already copied. The driver picks the timed calls it compares
in secret, before the loop, and tells the worker nothing about them.

At any point the worker may answer FAILURE {status, message, fatal} instead (a crash of the
candidate, a guard violation, an output of the wrong type); `fatal` means the process cannot go
on (a sticky CUDA error) and exits. The first frame, CONFIG, carries the channel key, so it alone
is unauthenticated; it travels from the driver to the worker on a pipe the driver created.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CONFIG = "config"
READY = "ready"
PROBE = "probe"
PROBED = "probed"
START = "start"
INPUTS = "inputs"
ROUND = "round"
ROUNDS_DONE = "rounds_done"
TIME = "time"
SKIP = "skip"
SKIPPED = "skipped"
CALL_OUTPUT = "call_output"
TIMING = "timing"
WORKLOAD_DONE = "workload_done"
FAILURE = "failure"

# The phases of INPUTS: a correctness round, or a call of the timed loop (warm-up included).
ROUND_PHASE = "round"
CALL_PHASE = "call"

CANDIDATE = "candidate"
REFERENCE_EAGER = "eager"
REFERENCE_COMPILE = "compile"
ROLES = (CANDIDATE, REFERENCE_EAGER, REFERENCE_COMPILE)

# How a worker ends when its check at a call's return (or after the import) finds the harness
# altered: at once, with this code and a line on stderr that starts with TAMPERED_MARK, since
# what would report it the usual way may be what was altered. The driver reads it as
# REWARD_HACK (a candidate that exits with it itself only accuses itself).
TAMPERED_EXIT = 86
TAMPERED_MARK = "solforge-tampered:"


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the worker needs; sent as the CONFIG frame."""

    key_hex: str
    role: str  # one of ROLES: the candidate, or the reference timed as a baseline
    problem_dir: str
    device: str
    source_dir: str | None  # the candidate's sources (importable from here)
    entry_file: str | None
    entry_function: str | None
    library: str | None  # a built C++ extension to import instead of sources
    module_name: str | None
    destination_passing_style: bool
    preload: tuple[str, ...]  # packages imported before the guards' snapshot (triton, ...)
    timing_method: str
    warmup: int
    iterations: int
    flush_bytes: int | None
    retain_bytes: int  # memory for the latest timed calls' inputs, kept alive on the device
    min_iterations: int = 0  # > 0: time adaptively, this many at least, `iterations` at most

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> WorkerConfig:
        return cls(**{**data, "preload": tuple(data["preload"])})
