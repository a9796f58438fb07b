"""The driver's verdict on one workload: lead the worker through the protocol and compare every
output it returns with the reference the driver computes itself.

A workload is PASSED only when every step is there: one output per correctness round, each
within tolerance; one seed request per warm-up and timed call, in order; a timing with one time
per timed call; and every re-checked timed output, within tolerance. Anything missing or out of
order is not a pass. The timed calls to re-check are drawn after the timed loop has ended, with
a random generator the worker cannot see; a timed output that is wrong although the rounds were
right is a REWARD_HACK (the candidate behaved differently when timed: cached, skipped or
deferred its work).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import torch

from solforge.harness import protocol
from solforge.harness.compare import Comparison, compare_outputs, worst_of
from solforge.harness.oracle import ReferenceFailure, ReferenceOracle
from solforge.harness.seeds import CALL, ROUND, SeedPlan
from solforge.harness.session import WorkerLost, WorkerSession
from solforge.harness.trace import Correctness, Status, parse_status
from solforge.problem.dtypes import storage_shape
from solforge.problem.workload import Workload

_RANDOM = secrets.SystemRandom()


@dataclass(frozen=True)
class WorkloadResult:
    uuid: str
    status: Status
    message: str = ""
    correctness: Correctness | None = None
    timing: dict[str, Any] | None = None  # the worker's TIMING frame
    first_call_ms: float | None = None
    verified: tuple[int, ...] = ()
    fatal: bool = False  # the worker cannot go on (it exits)


@dataclass(frozen=True)
class Plan:
    """How much checking and timing each workload gets."""

    seeds: SeedPlan
    rounds: int
    warmup: int
    iterations: int  # the timed calls; with min_iterations > 0, the most
    verify: int  # timed outputs re-checked per workload
    min_iterations: int = 0  # > 0: the worker stops once the median is known (timing.py)


class WorkerFailure(Exception):
    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        super().__init__(str(meta.get("message", "")))


class Judge:
    def __init__(self, session: WorkerSession, oracle: ReferenceOracle, plan: Plan,
                 timeout_s: float) -> None:
        self.session = session
        self.oracle = oracle
        self.plan = plan
        self.timeout_s = timeout_s

    def judge(self, workload: Workload) -> WorkloadResult:
        """The verdict; raises WorkerLost when the worker stops answering."""
        self.deadline = self.session.deadline(self.timeout_s)
        self.workload = workload
        self.max_payload = _output_bytes(self.oracle, workload)
        try:
            return self._judge()
        except WorkerFailure as failure:
            meta = failure.meta
            return WorkloadResult(workload.uuid, parse_status(meta.get("status")),
                                  str(meta.get("message", "")), fatal=bool(meta.get("fatal")))

    def _judge(self) -> WorkloadResult:
        uuid = self.workload.uuid
        round_seeds = [self.plan.seeds.seed(uuid, ROUND, r) for r in range(self.plan.rounds)]
        self.session.send(protocol.START, {"workload": uuid, "round_seeds": round_seeds})
        worst: Correctness | None = None
        failed: Comparison | None = None
        for number, seed in enumerate(round_seeds):
            frame = self._expect(protocol.ROUND)
            self._require(frame.meta.get("round") == number, f"round {number} missing")
            if failed is None:
                verdict = self._compare(frame.values, seed)
                failed = None if verdict.passed else verdict
                worst = worst_of(worst, verdict.correctness)
        first_call_ms = self._expect(protocol.ROUNDS_DONE).meta.get("first_call_ms")
        if failed is not None:
            self.session.send(protocol.SKIP)
            return WorkloadResult(uuid, failed.status, failed.message, failed.correctness)
        self.session.send(protocol.TIME)
        timing = self._serve_seeds()
        return self._verify_timed(worst, timing, first_call_ms)

    def _serve_seeds(self) -> dict[str, Any]:
        """Answer each seed request, in order; the TIMING frame ends the loop."""
        total = self.plan.warmup + self.plan.iterations  # the most calls that may be asked
        served = 0
        while True:
            frame = self._expect(protocol.SEED_REQUEST, protocol.TIMING)
            if frame.kind == protocol.TIMING:
                break
            self._require(frame.meta.get("iteration") == served and served < total,
                          f"seed request {frame.meta.get('iteration')!r} out of order")
            seed = self.plan.seeds.seed(self.workload.uuid, CALL, served)
            self.session.send(protocol.SEED, {"seed": seed})
            served += 1
        times = frame.meta.get("times_ms")
        fewest = self.plan.min_iterations or self.plan.iterations
        self._require(isinstance(times, list)
                      and fewest <= len(times) <= self.plan.iterations
                      and served == self.plan.warmup + len(times),
                      f"{served} calls were run for {len(times) if isinstance(times, list) else 0}"
                      f" timed ({self.plan.warmup} warm-up; {fewest} to "
                      f"{self.plan.iterations} timed expected)")
        self._require(all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0
                              for t in times), "the timing is incomplete")
        return frame.meta

    def _verify_timed(self, worst: Correctness | None, timing: dict[str, Any],
                      first_call_ms: float | None) -> WorkloadResult:
        uuid = self.workload.uuid
        total = self.plan.warmup + len(timing["times_ms"])
        chosen = sorted(_RANDOM.sample(range(total), min(self.plan.verify, total)))
        self.session.send(protocol.VERIFY, {"iterations": chosen})
        failed: Comparison | None = None
        for iteration in chosen:
            frame = self._expect(protocol.TIMED_OUTPUT)
            self._require(frame.meta.get("iteration") == iteration,
                          f"timed output {iteration} missing")
            if failed is None:
                seed = self.plan.seeds.seed(uuid, CALL, iteration)
                verdict = self._compare(frame.values, seed)
                if not verdict.passed:
                    failed = _timed_failure(verdict, iteration)
        self._expect(protocol.WORKLOAD_DONE)
        if failed is not None:
            return WorkloadResult(uuid, failed.status, failed.message, failed.correctness)
        return WorkloadResult(uuid, Status.PASSED, "", worst, timing, first_call_ms,
                              tuple(chosen))

    def _compare(self, values: list[Any], seed: int) -> Comparison:
        try:
            expected = self.oracle.expected(self.workload, seed)
        except ReferenceFailure as exc:
            return Comparison(Status.INVALID_REFERENCE, None, str(exc))
        shapes = self.oracle.output_shapes(self.workload)
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


def _timed_failure(verdict: Comparison, iteration: int) -> Comparison:
    if verdict.status is Status.INVALID_REFERENCE:
        return verdict
    message = (f"call {iteration} of the timed loop (warm-up included) returned wrong outputs "
               f"although every correctness round was right (work cached, skipped or deferred "
               f"when timed): {verdict.message}")
    return Comparison(Status.REWARD_HACK, None, message)


def _output_bytes(oracle: ReferenceOracle, workload: Workload) -> int:
    """The payload of a frame of outputs: anything larger was not written by the harness."""
    total = 0
    shapes = oracle.output_shapes(workload)
    for name, spec in oracle.problem.definition.outputs.items():
        shape = storage_shape(shapes[name] or (), spec.dtype)
        count = 1
        for size in shape:
            count *= size
        total += count * torch.empty((), dtype=spec.dtype.torch_dtype).element_size()
    return total
