"""Where an evaluation's time goes: named phases, timed by the driver and summed per evaluation.

A phase is timed with `with phase("build"): ...`, or switched with `switch("timing")` where the
protocol, not a block, marks its edges (the driver's frames to the worker). Phases nest; each
records its *exclusive* time (its children are subtracted), so the table adds up to the wall
time it covers. Recording goes to the `PhaseLog` that `collecting()` made current; without one
every call is a no-op, so instrumented code costs nothing when nobody asks.

The phases the harness records (seconds, wall clock, in the process that drives the unit):
- `unit_start`: a unit's process from spawn to its first line of work (interpreter + imports).
- `worker_wait`: waiting for a worker's READY: interpreter start, `import torch`, CUDA init and
  the candidate's import, minus whatever a pre-spawned worker did before it was needed.
- `candidate_import`: the candidate's import inside the worker (its READY reports it).
- `start_<step>`: the worker's own marks of its start (startup.py), carved out of `worker_wait`
  where the driver was waiting: `interpreter` (to its first line: the sandbox's entry and the
  harness's imports, `import torch` among them), `harness` (the worker's module), `triton`,
  `cuda` (the context and a first kernel), `jit_keys` (Triton's cache keys, jit_keys.py),
  `triton_launch` (its first launch, triton_warm.py), `profiler` (its first session: CUPTI),
  `idle` (waiting to be taken), `config` (the CONFIG frame and the problem), `preload`
  (libraries the solution declares), `warm_up` (the harness's own warm-up again), `guards`
  (their snapshot).
- `build`: compiling the solution (C++/CUDA) in its own process.
- `triton_ahead`: copying the candidate's Triton kernels compiled ahead into its worker's
  sandbox (sandbox/jit_ahead.py); what they save shows in `round_calls`, the first calls.
  `triton_ahead_none`: a candidate's worker that found none ready (its count is what says so).
- `compile_ahead`: starting the processes that compile the torch.compile baseline's graphs
  ahead (compile_ahead.py), and, as `compile/compile_ahead`, waiting for them;
  `compile/compiled_ahead`: copying their caches into its worker's sandbox.
- `correctness`: the correctness rounds (worker calls plus frames), `reference` excluded.
- `reference`: the driver computing reference outputs (rounds and re-checked timed calls).
- `timing`: the timed loop (warm-up, L2 flushes, the calls, seed requests).
- `verify`: from the worker's timing record to the workload's end (the chosen timed outputs
  that did not fit in the driver's memory were compared in the loop; the others are compared
  after it, as `compare` and `reference` at the top level).
- `eager/...`, `compile/...`: timing the reference as a baseline, by the phases above
  (`compile/correctness` holds torch.compile's own compile, in the first round).
- `device_wait`: waiting for a GPU shared with other units (device_lock.py): shared for the
  correctness rounds and the timed loop's warm-up, alone for its timed calls; zero on a GPU of
  one's own.
- `held:shared`, `held:exclusive`: how long the unit held that GPU's lock in each mode once it
  had it. These overlap the phases above (they are what the rounds and the timed loops ran
  under), so they are *held* totals, left out of the sum that adds up to the wall time (see
  `is_held`): the exclusive seconds per candidate are a floor under the time between results
  that no number of units sharing the GPU can go below.
- `baseline_lookup`: reading the baseline store; `sol`: T_SOL analysis of the workloads.
- `worker_close`: killing and reaping a worker; `store_write`: saving traces.
- `send_inputs`: the driver writing a call's inputs to the worker (into the shared area or the
  frame; a baseline's worker gets the seed and makes them, in its `receive`); `take_outputs`:
  copying a call's outputs out of its slots; `compare`: checking them against the reference,
  `reference` excluded. Nested in `correctness` and `timing`; the chosen timed outputs kept
  for after the loop are compared outside any phase of the protocol (judge.py).
- `round_<part>` and `loop_<part>`: the worker's own account of its work in the correctness
  rounds and the timed loops, carved out of `correctness` and `timing`: `receive` (copying the
  inputs in, from the moment their frame was read, and preparing the output buffers),
  `checks` (the guards), `calls`, `hand_over` (the outputs to the driver), and for the loops
  `timer` (flushes, synchronizations and the profiler). The worker's wait for the driver's
  frames is not in them: the driver's own phases above account for that time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseTotal:
    """Exclusive seconds spent in one named phase, over `count` entries."""

    name: str
    seconds: float
    count: int


class PhaseLog:
    """Exclusive time per phase name; a stack tracks nesting."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._stack: list[list] = []  # [name, start, child seconds, switched, group]

    def enter(self, name: str, switched: bool = False, group: bool = False) -> None:
        """Open `name`; inside a group phase it is recorded as `group/name`."""
        outer = next((entry[0] for entry in reversed(self._stack) if entry[4]), None)
        full = f"{outer}/{name}" if outer else name
        self._stack.append([full, time.perf_counter(), 0.0, switched, group])

    def exit(self) -> None:
        name, start, children, _, _ = self._stack.pop()
        elapsed = time.perf_counter() - start
        self.add(name, elapsed - children)
        if self._stack:
            self._stack[-1][2] += elapsed

    def switch(self, name: str | None) -> None:
        """End the open switched phase (if it is innermost) and start `name` (None: none)."""
        if self._stack and self._stack[-1][3]:
            self.exit()
        if name is not None:
            self.enter(name, switched=True)

    def record(self, name: str, seconds: float) -> None:
        """Time spent elsewhere (another process) inside the open phase: it is charged to
        `name` and taken out of the open phase, as a nested phase would be."""
        outer = next((entry[0] for entry in reversed(self._stack) if entry[4]), None)
        self.add(f"{outer}/{name}" if outer else name, seconds)
        if self._stack:
            self._stack[-1][2] += seconds

    def carve(self, parent: str, name: str, seconds: float) -> None:
        """Move `seconds` of the time `parent` has recorded to `name` (another process's account
        of a span this log timed as `parent`), never more than `parent` holds, so the table
        still adds up to the wall time."""
        outer = next((entry[0] for entry in reversed(self._stack) if entry[4]), None)
        parent, name = (f"{outer}/{parent}", f"{outer}/{name}") if outer else (parent, name)
        moved = min(max(seconds, 0.0), self._seconds.get(parent, 0.0))
        if moved > 0:
            self._seconds[parent] -= moved
            self.add(name, moved)

    def carve_all(self, parent: str, parts: Mapping[str, float]) -> None:
        """`carve` several parts at once, scaled down together when they add up to more than
        `parent` holds: the other process's account overlaps the driver's own nested phases
        (its checks after a call run while the driver compares), and scaling keeps every part
        in proportion where carving in turn would leave the last ones nothing."""
        outer = next((entry[0] for entry in reversed(self._stack) if entry[4]), None)
        held = self._seconds.get(f"{outer}/{parent}" if outer else parent, 0.0)
        total = sum(max(seconds, 0.0) for seconds in parts.values())
        scale = min(1.0, held / total) if total > 0 else 0.0
        for name, seconds in parts.items():
            self.carve(parent, name, max(seconds, 0.0) * scale)

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        self._seconds[name] = self._seconds.get(name, 0.0) + max(0.0, seconds)
        self._counts[name] = self._counts.get(name, 0) + count

    def held(self, name: str, seconds: float) -> None:
        """A held total (`is_held`): counted, never taken out of the open phase."""
        outer = next((entry[0] for entry in reversed(self._stack) if entry[4]), None)
        self.add(f"{outer}/{HELD}{name}" if outer else f"{HELD}{name}", seconds)

    def close(self) -> None:
        """End every open phase (an evaluation interrupted by an error)."""
        while self._stack:
            self.exit()

    def totals(self) -> tuple[PhaseTotal, ...]:
        return tuple(PhaseTotal(n, s, self._counts[n]) for n, s in self._seconds.items())


HELD = "held:"  # the prefix of a held total's name (after any group)


def is_held(name: str) -> bool:
    """Whether the phase is a held total, overlapping the others (not part of the wall time)."""
    return name.rpartition("/")[2].startswith(HELD)


_CURRENT: ContextVar[PhaseLog | None] = ContextVar("solforge_phase_log", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[PhaseLog]:
    """Make a fresh PhaseLog current for the block; phases recorded inside go to it."""
    log = PhaseLog()
    token = _CURRENT.set(log)
    try:
        yield log
    finally:
        log.close()
        _CURRENT.reset(token)


@contextlib.contextmanager
def phase(name: str, group: bool = False) -> Iterator[None]:
    """Time the block as phase `name` in the current log (nothing without one). In a `group`
    phase the phases opened inside are recorded as `name/inner`."""
    log = _CURRENT.get()
    if log is None:
        yield
        return
    log.enter(name, group=group)
    try:
        yield
    finally:
        log.exit()


def switch(name: str | None) -> None:
    """Switch the current log's protocol-driven phase (see `PhaseLog.switch`)."""
    log = _CURRENT.get()
    if log is not None:
        log.switch(name)


def record(name: str, seconds: float) -> None:
    """Add time measured elsewhere (another process) to the current log."""
    log = _CURRENT.get()
    if log is not None:
        log.record(name, seconds)


def held(name: str, seconds: float) -> None:
    """Add a held total to the current log (see `PhaseLog.held`)."""
    log = _CURRENT.get()
    if log is not None:
        log.held(name, seconds)


def carve(parent: str, name: str, seconds: float) -> None:
    """Move time from phase `parent` to `name` in the current log (see `PhaseLog.carve`)."""
    log = _CURRENT.get()
    if log is not None:
        log.carve(parent, name, seconds)


def carve_all(parent: str, parts: Mapping[str, float]) -> None:
    """Move several parts' time out of `parent` in proportion (see `PhaseLog.carve_all`)."""
    log = _CURRENT.get()
    if log is not None:
        log.carve_all(parent, parts)


def as_dict(totals: tuple[PhaseTotal, ...]) -> dict[str, dict[str, float | int]]:
    return {t.name: {"seconds": round(t.seconds, 4), "count": t.count} for t in totals}


def merge(tables: list[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Sum per-unit phase tables (from `as_dict`) into one: seconds and counts per phase."""
    merged: dict[str, dict[str, float]] = {}
    for table in tables:
        for name, entry in table.items():
            into = merged.setdefault(name, {"seconds": 0.0, "count": 0})
            into["seconds"] += float(entry["seconds"])
            into["count"] += int(entry["count"])
    return {n: {"seconds": round(e["seconds"], 4), "count": int(e["count"])}
            for n, e in sorted(merged.items(), key=lambda item: -item[1]["seconds"])}


def format_table(table: Mapping[str, Mapping[str, float]], per: int = 1) -> str:
    """A plain-text table: phase, total seconds, share, seconds per unit (`per` units); the held
    totals after the phases, their share of the same wall time (they overlap it)."""
    total = sum(float(e["seconds"]) for n, e in table.items() if not is_held(n)) or 1.0
    lines = [f"{'phase':<18} {'seconds':>9} {'share':>6} {'per unit':>9}"]
    ordered = sorted(table.items(), key=lambda item: is_held(item[0]))  # stable: phases first
    for name, entry in ordered:
        seconds = float(entry["seconds"])
        lines.append(f"{name:<18} {seconds:>9.2f} {seconds / total:>6.1%} "
                     f"{seconds / max(per, 1):>9.3f}")
    return "\n".join(lines)
