"""What the driver and the candidate's process say to each other, and in which order.

The driver leads; the worker never holds the plan. First

    driver                                    worker
    CONFIG {key, solution, ...}        ->
                                       <-     READY {import_seconds}

then per workload:

    START {workload, round seeds}      ->
                                       <-     ROUND {round} + outputs        (one per round)
                                       <-     ROUNDS_DONE {first_call_ms}
    TIME (rounds correct) | SKIP       ->
                                       <-     SEED_REQUEST {iteration}       (per iteration,
    SEED {seed}                        ->      warm-up and timed alike)
                                       <-     TIMING {times, clocks, ...}
    VERIFY {iterations}                ->
                                       <-     TIMED_OUTPUT {iteration} + outputs (each asked)
                                       <-     WORKLOAD_DONE
    ... next workload ...; when none is left the driver kills the worker's process group.

At any point the worker may answer FAILURE {status, message, fatal} instead (a crash of the
candidate, a guard violation, an output of the wrong type); `fatal` means the process cannot go
on (a sticky CUDA error) and exits. The first frame, CONFIG, carries the channel key, so it alone
is unauthenticated; it travels from the driver to the worker on a pipe the driver created.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CONFIG = "config"
READY = "ready"
START = "start"
ROUND = "round"
ROUNDS_DONE = "rounds_done"
TIME = "time"
SKIP = "skip"
SEED_REQUEST = "seed_request"
SEED = "seed"
TIMING = "timing"
VERIFY = "verify"
TIMED_OUTPUT = "timed_output"
WORKLOAD_DONE = "workload_done"
FAILURE = "failure"

CANDIDATE = "candidate"
REFERENCE_EAGER = "eager"
REFERENCE_COMPILE = "compile"
ROLES = (CANDIDATE, REFERENCE_EAGER, REFERENCE_COMPILE)


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
    retain_bytes: int  # memory for per-iteration inputs and frozen outputs on the device
    min_iterations: int = 0  # > 0: time adaptively, this many at least, `iterations` at most

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> WorkerConfig:
        return cls(**{**data, "preload": tuple(data["preload"])})
