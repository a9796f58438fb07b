"""How the tuner, the benchmark and the dispatcher's verification measure: random operands, the
float32 reference, the error against it, and several callables timed side by side.

Timing goes through solforge.measure.timing.time_iterations (cold L2 before every call; "kernel"
reads the profiler's kernel records, "graph" replays a CUDA graph per call). The callables are
interleaved in one run, so they share one profiler session and one clock history. Their order
is carryover-balanced (`interleaved_order`, a Williams design): each takes every place in a
round equally often, and follows each other callable equally often. The place alone was not
enough: on the H200 (2026-12-02), with the order fixed and then turned by one place each round,
the dispatcher's torch.matmul read more than 2% slower than the same torch.matmul call on 151
of 845 shapes and faster on 10. Both orders put the same callable before each: torch.matmul
right after the dispatcher (the same kernel on those shapes), the dispatcher after cuBLASLt.
A host delay of 10-100 us before a launch changed nothing measurable (hgemm_gap_probe.py), so
what ran just before is the suspect. Each callable's own iterations are summarised apart.
Server mode spaces the calls by exponential gaps (Poisson arrivals), slept before the L2
flush, outside the timed window: the GPU idles between calls as it does behind a server.

`Measurer` is what the tuner and the benchmark ask of a device, so the tests can substitute a
fake timer for the GPU.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from solforge.hgemm.space import Shape
from solforge.measure.timing import Timing, summarize, time_iterations

Call = Callable[[], object]
ORDER = "balanced"  # how time_interleaved orders its callables (a bench row records it)


@dataclass(frozen=True)
class Operands:
    a: torch.Tensor  # [M, K] row-major
    b: torch.Tensor  # [K, N], laid out as the shape says
    reference: torch.Tensor  # float32 [M, N]


class Measurer(Protocol):
    device: torch.device

    def operands(self, shape: Shape) -> Operands: ...

    def time(self, calls: dict[str, Call], method: str, rounds: int,
             gap_s: float | None = None) -> dict[str, Timing | str]: ...

    def synchronize(self) -> None: ...


def random_operands(shape: Shape, device: torch.device, seed: int = 0) -> Operands:
    """Standard-normal A and B (CUDA-L2's inputs; never zeros, METHOD.md) and their product in
    float32 with TF32 off."""
    generator = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((shape.m, shape.k), generator=generator, device=device)
    b_rows, b_cols = (shape.k, shape.n) if shape.layout == "nn" else (shape.n, shape.k)
    b = torch.randn((b_rows, b_cols), generator=generator, device=device)
    a, b = a.to(shape.torch_dtype), b.to(shape.torch_dtype)
    if shape.layout == "nt":
        b = b.T
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        reference = a.float() @ b.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return Operands(a, b, reference)


ERROR_CHUNK = 2**26  # elements compared at a time: float32 copies of a chunk, not of all C


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (Frobenius); infinite when out holds NaN or Inf. Taken over
    row blocks, so a 16384 x 151936 output needs no float32 copy of its whole."""
    rows = max(1, ERROR_CHUNK // max(1, out.shape[1]))
    difference = scale = 0.0
    for start in range(0, out.shape[0], rows):
        part = out[start:start + rows].float()
        if not torch.isfinite(part).all():
            return float("inf")
        expected = reference[start:start + rows]
        difference += torch.linalg.vector_norm(part - expected).item() ** 2
        scale += torch.linalg.vector_norm(expected).item() ** 2
    return math.sqrt(difference) / max(math.sqrt(scale), 1e-30)


def poisoned_output(shape: Shape, device: torch.device) -> torch.Tensor:
    """An output filled with NaN, so an element a kernel never writes fails the check."""
    return torch.full((shape.m, shape.n), float("nan"), dtype=shape.torch_dtype, device=device)


def time_interleaved(calls: dict[str, Call], method: str, rounds: int, warmup_rounds: int = 1,
                     gap_s: float | None = None, seed: int = 0) -> dict[str, Timing | str]:
    """Each callable's timing, or the reason it could not be timed (module docstring). When one
    callable spoils the run (a graph that cannot be captured, a library that raises), each is
    timed alone, so only the one at fault is reported as failed."""
    names = list(calls)
    functions = [calls[name] for name in names]
    count = len(functions)
    if count == 0:
        return {}
    before = _poisson_gaps(gap_s, seed) if gap_s else None
    order = interleaved_order(count, warmup_rounds + rounds)
    try:
        timing = time_iterations(lambda i: functions[order[i]](), iterations=rounds * count,
                                 warmup=warmup_rounds * count, method=method,
                                 before_iteration=before)
    except Exception as exc:  # a timing error, or whatever a library raised mid-run
        if count == 1:
            return {names[0]: f"{type(exc).__name__}: {exc}"}
        return {name: time_interleaved({name: calls[name]}, method, rounds, warmup_rounds, gap_s,
                                       seed)[name] for name in names}
    timed = order[warmup_rounds * count:]
    return {name: summarize(method, [t for t, k in zip(timing.times_ms, timed) if k == index],
                            timing.sm_clock_mhz, timing.mem_clock_mhz)
            for index, name in enumerate(names)}


def interleaved_order(count: int, rounds: int) -> list[int]:
    """Which callable each iteration runs: every round runs all `count` once, round r in the
    order of row r of `balanced_rounds` (cycling)."""
    rows = balanced_rounds(count)
    return [index for r in range(rounds) for index in rows[r % len(rows)]]


def balanced_rounds(count: int) -> list[list[int]]:
    """A Williams design: rounds in which each callable takes each place equally often and
    directly follows each other callable equally often (once over `count` rounds when `count`
    is even; twice over 2 x `count`, the rows and their mirrors, when it is odd). The first
    row zigzags, 0 1 n-1 2 n-2 ...; row r adds r to each index, mod `count`."""
    if count < 1:
        return []
    first, low, high = [0], 1, count - 1
    while low <= high:
        first.append(low)
        low += 1
        if low <= high:
            first.append(high)
            high -= 1
    rows = [[(index + r) % count for index in first] for r in range(count)]
    return rows + [row[::-1] for row in rows] if count % 2 else rows


def host_us_per_call(call: Callable[[], object], calls: int, runs: int = 3,
                     device: torch.device | None = None) -> float:
    """Host microseconds per call: the best of `runs` runs of `calls` calls, after one untimed
    run. With a CUDA `device`, its queue is drained after each run (launches are asynchronous,
    so this is host time as long as the GPU keeps up)."""
    best = float("inf")
    for run in range(runs + 1):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        if run:
            best = min(best, (time.perf_counter() - began) / calls * 1e6)
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
    return best


def _poisson_gaps(mean_s: float, seed: int) -> Callable[[int], None]:
    rng = random.Random(seed)

    def sleep(_: int) -> None:
        time.sleep(rng.expovariate(1.0 / mean_s))

    return sleep


def median_ms(result: Timing | str | None) -> float | None:
    return result.median_ms if isinstance(result, Timing) else None


def failure(result: Timing | str | None) -> str | None:
    return result if isinstance(result, str) else None


class CudaMeasurer:
    """The Measurer of a CUDA device."""

    def __init__(self, device: torch.device | str | None = None, seed: int = 0,
                 warmup_rounds: int = 1) -> None:
        self.device = torch.device(device or "cuda")
        self.seed = seed
        self.warmup_rounds = warmup_rounds

    def operands(self, shape: Shape) -> Operands:
        return random_operands(shape, self.device, self.seed)

    def time(self, calls: dict[str, Call], method: str, rounds: int,
             gap_s: float | None = None) -> dict[str, Timing | str]:
        return time_interleaved(calls, method, rounds, self.warmup_rounds, gap_s, self.seed)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)
