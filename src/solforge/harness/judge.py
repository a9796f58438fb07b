"""The driver's verdict on one workload: lead the worker through the protocol, hand it every input,
take every output the moment its call returns, and compare with the reference the driver
computes itself.

A workload is PASSED only when every step is there: one output per correctness round, each
within tolerance; one output per warm-up and timed call, in order; a timing with one raw time
per timed call; and every timed output the driver chose to compare, within tolerance. Anything
missing or out of order is not a pass. The timed calls to compare are drawn before the loop, in
the driver, with a random generator the worker cannot see, and the worker is never told which
they were: it hands over every output alike, and a candidate's timed output that is wrong
although the rounds were right is a REWARD_HACK (the candidate behaved differently when timed:
cached, skipped or deferred its work); a baseline's keeps its numerical verdict. The driver
recomputes median, min, max and spread from the raw times, and holds each time to the wall-clock
bracket it saw around the call (from sending its inputs to receiving its outputs): a call cannot
take longer than the time it was given. On a GPU shared with other units (device_lock.py) the
rounds and the timed loop's warm-up hold the device shared and the timed calls hold it alone;
the driver's own device work around them stays out of that where memory allows (AHEAD_BYTES,
HELD_BYTES): the first timed calls' inputs are made before it and the chosen timed outputs
compared after it, in call order.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from solforge.data.dtypes import storage_shape
from solforge.data.trace import Correctness, Status, parse_status
from solforge.data.workload import Workload
from solforge.harness import device_lock, handover, phases, protocol, vmm
from solforge.harness.compare import Comparison, compare_outputs, worst_of
from solforge.harness.handover import SharedInputs
from solforge.harness.oracle import ReferenceFailure, ReferenceOracle, tensor_bytes
from solforge.harness.seeds import CALL, ROUND, SeedPlan
from solforge.harness.session import WorkerLost, WorkerSession
from solforge.measure.timing import METHODS, Timing, TimingError, summarize
from solforge.problem.reference import describe_exception

_RANDOM = secrets.SystemRandom()
# The driver's device memory for work moved out of the timed loop, which holds the GPU alone
# when units share it (device_lock.py): the first timed calls' inputs made before it, and the
# chosen timed outputs (with their inputs) compared after it. Larger workloads do that work
# inside the loop, as before.
AHEAD_BYTES = 1 << 30
HELD_BYTES = 1 << 30
# Slack on the wall-clock bracket: the profiler's clock and the driver's are different clocks.
BRACKET_SLACK = 1.01
BRACKET_SLACK_MS = 0.05


@dataclass(frozen=True)
class WorkloadResult:
    uuid: str
    status: Status
    message: str = ""
    correctness: Correctness | None = None
    timing: dict[str, Any] | None = None  # the driver's statistics of the worker's raw times
    first_call_ms: float | None = None
    verified: tuple[int, ...] = ()
    fatal: bool = False  # the worker cannot go on (it exits)
    handover: str = ""  # handover.KIND, or how the frames carried them and why (TimingReport)


@dataclass(frozen=True)
class Plan:
    """How much checking and timing each workload gets."""

    seeds: SeedPlan
    rounds: int
    warmup: int
    iterations: int  # the timed calls; with min_iterations > 0, the most
    verify: int  # timed outputs compared per workload
    min_iterations: int = 0  # > 0: the worker stops once the median is known (timing.py)
    screened: bool = False  # a brief timing (evaluate.SCREEN), not the device's full one


class InputFailure(Exception):
    """The problem's own input generation failed in the driver: INVALID_REFERENCE."""


class ForgedTiming(Exception):
    """Raw times that cannot have been measured: the worker's timing records were forged."""


class WorkerFailure(Exception):
    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        super().__init__(str(meta.get("message", "")))


@dataclass
class _Loop:
    """What a timed loop leaves for the verdict: the calls chosen for comparison, each call's
    wall-clock bracket, the worker's timing record, and the chosen outputs kept to be compared
    after the loop (call, seed, private copies) or the first failure already found."""

    chosen: set[int]
    brackets_ms: list[float] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    held: list[tuple[int, int, list[Any]]] = field(default_factory=list)
    held_bytes: int = 0
    failed: Comparison | None = None


class Judge:
    def __init__(self, session: WorkerSession, oracle: ReferenceOracle, plan: Plan,
                 timeout_s: float, seeds_to_worker: bool = False, candidate: bool = True
                 ) -> None:
        self.session = session
        self.candidate = candidate  # False: a baseline's worker (our own code, no candidate)
        self.oracle = oracle
        self.plan = plan
        self.timeout_s = timeout_s
        # A reference role's worker (a baseline: our own code, no candidate in it) is sent each
        # call's seed and makes the inputs itself where it can make them bit for bit
        # (reproducible_inputs, or a custom generator the oracle found repeatable), so no copy
        # of them crosses to it. A candidate's worker is never told a seed: it could compute
        # ahead of the call.
        self.seeds_to_worker = seeds_to_worker
        self.seed_only: bool | None = None
        self.shared: SharedInputs | vmm.FdShared | None = None
        self.slots: list[torch.Tensor | None] | None = None  # this workload's output slots
        self.probed = oracle.device.type != "cuda"  # IPC is for device tensors only
        writer = getattr(session, "writer", None)
        # Inputs and outputs in the frames: their tensors in the shared area (area.py) when
        # the worker has one, else in the pipe.
        self.frames = "shared_memory" if getattr(writer, "area", None) else "pipe"
        self.handover = self.frames if self.probed else ""  # set by the probe on a GPU
        # CUDA IPC maps only between processes of one uid (measured on the H200): across the
        # sandbox's, device memory is shared by descriptor (vmm.py) where the worker has the
        # socket for it, else the frames carry the tensors
        self.link = getattr(session, "link", None)
        self.across_uids = getattr(getattr(session, "sandbox", None), "uid", None) is not None
        if not self.probed and self.across_uids and self.link is None:
            self.probed = True
            self.handover = f"{self.frames} (CUDA IPC does not map across the sandbox's uid)"

    def judge(self, workload: Workload) -> WorkloadResult:
        """The verdict; raises WorkerLost when the worker stops answering."""
        self.deadline = self.session.deadline(self.timeout_s)
        self.workload = workload
        self.seed_only: bool | None = None  # whether this workload's calls go as seeds
        self.max_payload = _output_bytes(self.oracle, workload)
        try:
            if not self.probed:
                with device_lock.current().shared() as waited:  # its copy runs on the GPU
                    self.deadline += waited
                    self._probe()
            return self._judge()
        except WorkerFailure as failure:
            meta = failure.meta
            return WorkloadResult(workload.uuid, parse_status(meta.get("status")),
                                  str(meta.get("message", "")), fatal=bool(meta.get("fatal")))
        except InputFailure as failure:  # the worker waits for inputs that will not come
            return WorkloadResult(workload.uuid, Status.INVALID_REFERENCE, str(failure),
                                  fatal=True)
        finally:
            self.slots = None
            self.oracle.release(workload)

    def _judge(self) -> WorkloadResult:
        uuid = self.workload.uuid
        start: dict[str, Any] = {"workload": uuid, "rounds": self.plan.rounds}
        if self.shared is not None:
            with _worker_reachable():
                self.slots, start["slots"] = self.shared.output_slots(
                    _output_layouts(self.oracle, self.workload))
        self.session.send(protocol.START, start)
        worst: Correctness | None = None
        failed: Comparison | None = None
        lock = device_lock.current()  # a GPU shared with other units: rounds side by side
        with lock.shared() as waited:
            self.deadline += waited
            for number in range(self.plan.rounds):
                seed = self.plan.seeds.seed(uuid, ROUND, number)
                self._hand_over(protocol.ROUND_PHASE, number, seed)
                if failed is None:
                    self._reference_ahead(seed)
                frame = self._expect(protocol.ROUND)
                self._require(frame.meta.get("round") == number, f"round {number} missing")
                if failed is None:
                    verdict = self._compare(self._taken(frame), seed)
                    failed = None if verdict.passed else verdict
                    worst = worst_of(worst, verdict.correctness)
                else:
                    self.oracle.forget(self.workload, seed)
            done = self._expect(protocol.ROUNDS_DONE).meta
        first_call_ms = done.get("first_call_ms")
        if failed is not None:
            self.session.send(protocol.SKIP)
            _record_worker_seconds(done.get("worker_seconds"), "correctness", "round")
            self._expect(protocol.SKIPPED)  # or the FAILURE of a late write
            return WorkloadResult(uuid, failed.status, failed.message, failed.correctness)
        hold = _LoopHold(lock)
        try:
            # shared: the driver's own work on the device, then the loop's warm-up (untimed)
            self.deadline += hold.take(exclusive=False)
            self._inputs_ahead()
            self.session.send(protocol.TIME)
            # carved once the send has closed `correctness` (an open phase holds no seconds)
            _record_worker_seconds(done.get("worker_seconds"), "correctness", "round")
            loop = self._timed(hold)
        finally:
            hold.release()
        with lock.shared() as waited:
            self.deadline += waited
            return self._verdict(loop, worst, first_call_ms)

    def close(self) -> None:
        """Free the arenas shared with the worker (vmm.py), once it is done with them."""
        if isinstance(self.shared, vmm.FdShared):
            self.shared.close()
        self.shared = None

    def _probe(self) -> None:
        """Once per worker on a GPU: hand inputs and outputs over through device memory (CUDA
        IPC, or across the sandbox's uid arenas shared by descriptor) if the worker can map a
        shared tensor and write into a slot, else as bytes."""
        self.probed = True
        device = self.oracle.device
        name, kind = ("CUDA VMM", vmm.KIND) if self.across_uids else ("CUDA IPC", handover.KIND)
        try:
            shared = (vmm.FdShared(device, self.link) if self.across_uids
                      else SharedInputs(device))
            values, descriptions = shared.share([handover.probe_value(device)])
            slots, slot_descriptions = shared.output_slots([handover.probe_slot(device)])
            slots[0].zero_()
            torch.cuda.synchronize(device)  # zeroed before the worker can write it
        except Exception as exc:  # no IPC in this driver
            self.handover = f"{self.frames} ({name} unavailable in the driver: {exc})"[:300]
            return
        self.session.send(protocol.PROBE, {"shared": descriptions, "slots": slot_descriptions},
                          values)
        frame = self.session.receive(self.deadline, 0, "the worker did not answer the probe")
        if frame.kind == protocol.FAILURE:
            raise WorkerFailure(frame.meta)
        self._require(frame.kind == protocol.PROBED, f"expected probed, got {frame.kind}")
        written = int(handover.taken([0], slots)[0].item())
        if frame.meta.get("sum") == handover.PROBE_SUM == written:
            self.shared = shared
            self.handover = kind
        else:
            error = str(frame.meta.get("error") or f"the slot held {written}").splitlines()[0]
            self.handover = f"{self.frames} ({name} failed in the worker: {error})"[:300]
            if isinstance(shared, vmm.FdShared):
                shared.close()
        shared.release()

    def _hand_over(self, phase: str, index: int, seed: int) -> float:
        """Send the inputs of one call (through CUDA IPC on a GPU, as bytes otherwise); the
        moment the sending began. The worker may read them and start the call before the send
        returns here, so the bracket opens before it: a bound the honest can never exceed.
        With `seeds_to_worker`, only the seed goes; the oracle makes the inputs later, for the
        outputs it compares."""
        meta: dict[str, Any] = {"workload": self.workload.uuid, "phase": phase, "index": index}
        inputs: list[Any] = []
        try:
            if self.seed_only is None:  # decided at the workload's first call
                self.seed_only = self.seeds_to_worker and (
                    reproducible_inputs(self.workload)
                    or self.oracle.repeatable(self.workload, seed))
            seed_only = self.seed_only
            if not seed_only:
                inputs = self.oracle.inputs(self.workload, seed)
        except Exception as exc:
            raise InputFailure(f"making the inputs of {phase} {index} failed: "
                               f"{describe_exception(exc)}") from None
        if seed_only:
            meta["seed"] = seed
        if self.shared is not None and not seed_only:
            with _worker_reachable():
                inputs, meta["shared"] = self.shared.share(inputs)
        began = time.monotonic()
        with phases.phase("send_inputs"):
            self.session.send(protocol.INPUTS, meta, inputs)
        return began

    def _inputs_ahead(self) -> None:
        """Make the first timed calls' inputs before the timed loop takes the device alone
        (the oracle keeps them until each is handed over): the loop then only hands them out.
        As many as AHEAD_BYTES holds, from the first call's size; none when the worker makes
        its own from the seed."""
        if self.seed_only is not False:
            return
        uuid = self.workload.uuid
        fewest = self.plan.warmup + (self.plan.min_iterations or self.plan.iterations)
        try:
            first = self.oracle.inputs(self.workload, self.plan.seeds.seed(uuid, CALL, 0))
            for i in range(1, min(fewest, AHEAD_BYTES // max(tensor_bytes(first), 1))):
                self.oracle.inputs(self.workload, self.plan.seeds.seed(uuid, CALL, i))
        except Exception as exc:
            raise InputFailure(f"making the inputs of the timed calls failed: "
                               f"{describe_exception(exc)}") from None

    def _timed(self, hold: _LoopHold) -> _Loop:
        """Hand over each call's inputs and take its outputs; the secretly chosen ones are kept
        for `_verdict` to compare once the loop has let the device go (where they fit in
        HELD_BYTES; else each is compared as it arrives, as before). The device is held alone
        from the first timed call's inputs on (`hold`): the warm-up before it times nothing."""
        uuid = self.workload.uuid
        total = self.plan.warmup + self.plan.iterations
        fewest = self.plan.warmup + (self.plan.min_iterations or self.plan.iterations)
        chosen = _secret_choice(fewest, total, self.plan.verify)
        loop = _Loop(chosen)
        meta = None
        for i in range(total):
            if i == self.plan.warmup:  # the first timed call: no other unit's work beside it
                self.deadline += hold.take(exclusive=True)
            seed = self.plan.seeds.seed(uuid, CALL, i)
            sent = self._hand_over(protocol.CALL_PHASE, i, seed)
            frame = self._expect(protocol.CALL_OUTPUT, protocol.TIMING)
            if frame.kind == protocol.TIMING:  # the worker's stop rule ended the loop
                self._require(i >= fewest, f"the timed loop stopped after {i} of at least "
                                           f"{fewest} calls")
                meta = frame.meta
                self.oracle.forget(self.workload, seed)  # handed over, never called
                chosen &= set(range(i))
                break
            loop.brackets_ms.append((time.monotonic() - sent) * 1e3)
            self._require(frame.meta.get("iteration") == i, f"output of call {i} missing")
            if i not in chosen:
                self.oracle.forget(self.workload, seed)
            elif loop.failed is None:
                if not self._held_fits(loop, seed):  # compared now: its reference first
                    self._reference_ahead(seed)
                self._check_timed(loop, i, seed, self._taken(frame))
        if meta is None:
            meta = self._expect(protocol.TIMING).meta
        loop.meta = meta
        _record_worker_seconds(meta.get("worker_seconds"), "timing", "loop")
        self._expect(protocol.WORKLOAD_DONE)
        return loop

    def _held_fits(self, loop: _Loop, seed: int) -> bool:
        """Whether a chosen timed call's outputs (at most `max_payload`) would be kept for
        later: where they would not, `_check_timed` compares them as they arrive, and their
        reference is computed before they are taken (the call has returned: the device works on
        nothing timed until the next call's inputs are handed over)."""
        size = self.max_payload + self.oracle.kept_bytes(self.workload, seed)
        return loop.held_bytes + size <= HELD_BYTES

    def _check_timed(self, loop: _Loop, i: int, seed: int, values: list[Any]) -> None:
        """A chosen timed output: kept for later while the kept ones fit in HELD_BYTES (with
        the inputs the oracle keeps for their reference), else compared now."""
        size = tensor_bytes(values) + self.oracle.kept_bytes(self.workload, seed)
        if loop.held_bytes + size <= HELD_BYTES:
            loop.held.append((i, seed, values))
            loop.held_bytes += size
            return
        for earlier in self._compared(loop):  # in order: the first wrong call is the verdict
            loop.failed = earlier
            return
        verdict = self._compare(values, seed)
        if not verdict.passed:
            loop.failed = _timed_failure(verdict, i, self.candidate)

    def _compared(self, loop: _Loop) -> list[Comparison]:
        """Compare the kept outputs, in call order; the first failure (if any), in a list."""
        held, loop.held, loop.held_bytes = loop.held, [], 0
        for i, seed, values in held:
            verdict = self._compare(values, seed)
            if not verdict.passed:
                return [_timed_failure(verdict, i, self.candidate)]
        return []

    def _verdict(self, loop: _Loop, worst: Correctness | None,
                 first_call_ms: float | None) -> WorkloadResult:
        """The workload's verdict once the loop is over: the kept outputs compared, then the
        driver's statistics of the raw times."""
        uuid = self.workload.uuid
        if loop.failed is None:
            loop.failed = next(iter(self._compared(loop)), None)
        failed = loop.failed
        if failed is not None:
            return WorkloadResult(uuid, failed.status, failed.message, failed.correctness)
        try:
            timing = recompute_timing(loop.meta, loop.brackets_ms[self.plan.warmup:])
        except ForgedTiming as exc:
            return WorkloadResult(uuid, Status.REWARD_HACK, str(exc))
        return WorkloadResult(uuid, Status.PASSED, "", worst, timing._asdict(), first_call_ms,
                              tuple(sorted(loop.chosen)), handover=self.handover)

    def _reference_ahead(self, seed: int) -> None:
        """A call's reference, computed before its outputs are taken (a round's while the
        worker runs the call; a timed call's compared as it arrives, once it returned): on an
        80 GB H100 a log-softmax's reference (a float32 copy of its 4 GiB of
        logits, then its 8 GiB output) ran out of memory beside the 8 GiB of outputs taken
        first (the driver's 20.01 GiB allocated match the 4 GiB of inputs, those outputs and
        that copy, by their sizes). Its time is added to the worker's deadline; a failure is
        left to `_compare`, which computes it again and reports it."""
        began = time.monotonic()
        with contextlib.suppress(ReferenceFailure):
            self.oracle.expected(self.workload, seed)
        self.deadline += time.monotonic() - began

    def _taken(self, frame) -> list[Any]:
        """A frame's outputs as private copies: from this workload's slots where the driver
        has them, else from the frame (whose tensors may be views of the shared area)."""
        with phases.phase("take_outputs"):
            if self.slots is None:  # copied straight to the reference's device
                device = self.oracle.device
                return [v.to(device, copy=True) if isinstance(v, torch.Tensor) else v
                        for v in frame.values]
            try:
                return handover.taken(frame.values, self.slots)
            except ValueError as exc:
                raise WorkerLost(Status.RUNTIME_ERROR, f"protocol broken: {exc}") from None

    def _compare(self, values: list[Any], seed: int) -> Comparison:
        try:
            expected = self.oracle.expected(self.workload, seed)
        except ReferenceFailure as exc:
            return Comparison(Status.INVALID_REFERENCE, None, str(exc))
        shapes = self.oracle.output_shapes(self.workload)
        with phases.phase("compare"):
            return compare_outputs(values, expected, self.oracle.problem.definition, shapes,
                                   self.workload.tolerance)

    def _expect(self, *kinds: str):
        frame = self.session.receive(self.deadline, self.max_payload,
                                     f"the workload did not finish within {self.timeout_s:g} s")
        if frame.kind == protocol.FAILURE:
            raise WorkerFailure(frame.meta)
        self._require(frame.kind in kinds and frame.meta.get("workload") == self.workload.uuid,
                      f"expected {'/'.join(kinds)} for {self.workload.uuid}, got {frame.kind}")
        return frame

    def _require(self, condition: bool, what: str) -> None:
        if not condition:
            raise WorkerLost(Status.RUNTIME_ERROR, f"protocol broken: {what}")


class _LoopHold:
    """The GPU's lock as one timed loop holds it (device_lock.py): shared through the driver's
    work before it and the warm-up, whose times are thrown away, so other units' correctness
    rounds run beside them; alone from the first timed call to the last. Sharing the warm-up
    takes about a third of each loop's calls (10 of the 30 a loop that stops at its fewest
    makes) out of the time the GPU is held alone, which bounds the rate of units sharing it."""

    def __init__(self, lock: device_lock.DeviceLock | device_lock.NoLock) -> None:
        self.lock = lock
        self.held: contextlib.AbstractContextManager[float] | None = None

    def take(self, exclusive: bool) -> float:
        """Let go of what is held, then hold the device in the new mode; the seconds waited."""
        self.release()
        held = self.lock.exclusive() if exclusive else self.lock.shared()
        waited = held.__enter__()
        self.held = held
        return waited

    def release(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.__exit__(None, None, None)


@contextlib.contextmanager
def _worker_reachable() -> Iterator[None]:
    """A worker gone while its arena's descriptor was being sent (vmm.py) is a lost worker."""
    try:
        yield
    except OSError as exc:
        raise WorkerLost(Status.RUNTIME_ERROR, f"the worker stopped taking device memory: "
                                               f"{exc}") from None


def _secret_choice(fewest: int, total: int, verify: int) -> set[int]:
    """The calls whose outputs are compared: `verify` of the first `fewest` (which always run),
    and each later call (run only if the stop rule has not ended the loop) with the same odds,
    so no call is known to go unchecked."""
    chosen = set(_RANDOM.sample(range(fewest), min(verify, fewest)))
    odds = min(verify, total) / total if total else 0.0
    return chosen | {i for i in range(fewest, total) if _RANDOM.random() < odds}


def recompute_timing(meta: dict[str, Any], brackets_ms: list[float]) -> Timing:
    """The statistics of the worker's raw times, computed here; each time held to the driver's
    wall-clock bracket of its call. Raises WorkerLost for a malformed record, ForgedTiming for
    one that cannot have been measured."""
    times = meta.get("times_ms")
    method = meta.get("method")
    if (method not in METHODS or not isinstance(times, list) or len(times) != len(brackets_ms)
            or not all(_is_number(t) and t >= 0 for t in times)):
        raise WorkerLost(Status.RUNTIME_ERROR, "protocol broken: the timing is incomplete")
    for k, (reported, bracket) in enumerate(zip(times, brackets_ms)):
        if reported > bracket * BRACKET_SLACK + BRACKET_SLACK_MS:
            raise ForgedTiming(f"timed call {k} reported {reported:.4g} ms, longer than the "
                               f"{bracket:.4g} ms the driver saw between handing over its "
                               f"inputs and receiving its outputs: forged timing records, or "
                               f"device work launched after the call returned")
    kernels = meta.get("kernels_per_iteration")
    try:
        return summarize(method, times, _clock_range(meta.get("sm_clock_mhz")),
                         _clock_range(meta.get("mem_clock_mhz")),
                         float(kernels) if _is_number(kernels) else None)
    except TimingError as exc:
        raise WorkerLost(Status.RUNTIME_ERROR, f"protocol broken: {exc}") from None


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _clock_range(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value):
        return float(value[0]), float(value[1])
    return None


def _record_worker_seconds(reported: Any, parent: str, prefix: str) -> None:
    """The worker's own account of its work in the correctness rounds or the timed loop,
    carved out of `parent` as phases `<prefix>_<part>` (a diagnostic: it moves time between
    phases of the table, never into a verdict)."""
    if not isinstance(reported, dict):
        return
    parts = {f"{prefix}_{part}": float(seconds) for part, seconds in list(reported.items())[:8]
             if isinstance(part, str) and part.isidentifier() and _is_number(seconds)}
    phases.carve_all(parent, parts)


def _timed_failure(verdict: Comparison, iteration: int, candidate: bool = True) -> Comparison:
    """A timed call's wrong outputs after right rounds: a candidate's are a REWARD_HACK (it
    behaved differently when timed); a baseline's (the problem's own reference, no candidate
    code in its process: nothing there can cheat) keep their own verdict, since its results
    vary between calls (torch.compile of a MoE layer did, on the H200, 2026-12-03)."""
    if verdict.status is Status.INVALID_REFERENCE:
        return verdict
    if not candidate:
        message = (f"call {iteration} of the timed loop (warm-up included) returned wrong "
                   f"outputs although every correctness round was right: this baseline's "
                   f"results vary between calls: {verdict.message}")
        return Comparison(verdict.status, verdict.correctness, message)
    message = (f"call {iteration} of the timed loop (warm-up included) returned wrong outputs "
               f"although every correctness round was right (work cached, skipped or deferred "
               f"when timed): {verdict.message}")
    return Comparison(Status.REWARD_HACK, None, message)


def _output_layouts(oracle: ReferenceOracle, workload: Workload
                    ) -> list[tuple[tuple[int, ...], torch.dtype] | None]:
    """(storage shape, dtype) of each tensor output as the worker hands it over; None for a
    number."""
    shapes = oracle.output_shapes(workload)
    return [None if spec.shape is None
            else (storage_shape(shapes[name] or (), spec.dtype), spec.dtype.torch_dtype)
            for name, spec in oracle.problem.definition.outputs.items()]


def reproducible_inputs(workload: Workload) -> bool:
    """Whether another process surely makes this workload's inputs bit for bit from the seed:
    random inputs come from a generator seeded per input and safetensors from their file, but a
    problem's own custom_inputs code may draw from anything (Python's random, the clock), so
    those go as a seed only once the oracle finds them repeatable."""
    return all(source.kind != "custom" for source in workload.inputs.values())


def _output_bytes(oracle: ReferenceOracle, workload: Workload) -> int:
    """The payload of a frame of outputs: anything larger was not written by the harness."""
    shapes = oracle.output_shapes(workload)
    total = 0
    for name, spec in oracle.problem.definition.outputs.items():
        count = math.prod(storage_shape(shapes[name] or (), spec.dtype))
        total += count * torch.empty((), dtype=spec.dtype.torch_dtype).element_size()
    return total
