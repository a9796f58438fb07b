"""Time one callable over many iterations, each on a cold L2, and say how it was timed.

Four methods, because none is right everywhere:
- "kernel" (default): the profiler's records of device work (kernels, memcpys, memsets) on every
  stream; an iteration lasts from the start of its first record to the end of its last. Host
  launch cost stays out (it dominates below ~50 us), and work a candidate hides on a side stream
  or a background thread stays in.
- "events": CUDA events around the call with a device-wide synchronize before the end event, so
  side-stream work is inside; the time includes launch cost and one synchronize round trip.
- "graph": the call captured in a CUDA graph and its replay timed with events: launch gaps shrink
  to what the graph keeps.
- "cpu": the host's perf_counter around the call; a CPU timing, labelled as such.

Every iteration, warm-up or timed, has the same shape, so a candidate cannot tell them apart
("graph" aside: its warm-up runs eagerly, as capture needs): untimed setup (`before_iteration`),
a write of a buffer twice the L2 size (evicts the inputs), a synchronize, the call, a
device-wide synchronize, a clock sample.

How "kernel" assigns device work to iterations: the harness wraps its own setup and flush in
profiler ranges named with a secret token; a device record belongs to the harness when the host
op that launched it (the profiler's correlation link) ran on the harness thread inside such a
range. The flush of iteration k is its marker on the device timeline. The harness opens exactly
two setup ranges and one flush range per iteration; any other count means someone else used the
name (it can be read from the harness's frames) to pass its own work off as the harness's, and
the measurement is rejected as forged. Every other record belongs
to the iteration whose marker started last before it, whichever stream or thread it came from:
work a thread launches after its iteration's synchronize is charged to the iteration running
when it starts, never dropped. Records that start before the first marker predate the
measurement and are left out. No method sees work launched after the measurement has ended;
the harness's thread checks cover that.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch._C._profiler import _ExperimentalConfig
from torch.autograd import (
    DeviceType,
    ProfilerActivity,
    ProfilerConfig,
    ProfilerState,
    _disable_profiler,
    _enable_profiler,
    _prepare_profiler,
)
from torch.autograd.profiler import _run_on_profiler_start, _run_on_profiler_stop

from solforge.errors import SolforgeError
from solforge.measure.clocks import ClockReader, ClockSampler, clock_reader

METHODS = ("kernel", "events", "graph", "cpu")
_RUNTIME_NAME = re.compile(r"^(cuda|cu)[A-Z]")  # cudaLaunchKernel, cuLaunchKernelEx, ...
_SYNC_NAME = re.compile(r"Synchroniz|Sync\b|Wait")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # the profiler's names for device work
# Host records of torch ops. Runtime-API records (cudaLaunchKernel) are left out: their
# correlation ids are CUPTI's, another numbering than the op ids device records link to.
TORCH_OPS = ("cpu_op", "user_annotation")


class TimingError(SolforgeError):
    """A measurement that could not be taken or cannot be trusted."""


class TimingTampered(TimingError):
    """The timing's own state changed under it: a candidate's doing (a reward hack)."""


class ForgedRange(TimingTampered):
    """A profiler range under the harness's secret name that the harness did not open."""


class FlushTampered(TimingTampered):
    """The L2 flush's buffers are not the ones the loop made (moved, resized or re-strided)."""


class Timing(NamedTuple):
    """One measured callable. Times in milliseconds, one per timed iteration.

    A named tuple, not a frozen dataclass: `object.__setattr__` rebinds a frozen dataclass's
    field, and a candidate's call can reach the Timing of a loop's earlier chunk from the
    timing frames; a tuple's fields cannot be set from Python."""

    method: str  # one of METHODS
    times_ms: tuple[float, ...]
    median_ms: float
    min_ms: float
    max_ms: float
    spread: float  # (p90 - p10) / median
    sm_clock_mhz: tuple[float, float] | None  # min, max seen during the run (None on CPU)
    mem_clock_mhz: tuple[float, float] | None
    kernels_per_iteration: float | None  # device records per timed iteration ("kernel" only)


@dataclass(frozen=True)
class DeviceSpan:
    """One record of device work: `linked_id` is the correlation id of the host op that launched
    it (0 when the profiler knows none)."""

    start_ns: int
    end_ns: int
    linked_id: int


def summarize(method: str, times_ms: Sequence[float],
              sm_clock_mhz: tuple[float, float] | None = None,
              mem_clock_mhz: tuple[float, float] | None = None,
              kernels_per_iteration: float | None = None) -> Timing:
    if not times_ms:
        raise TimingError("no timed iterations to summarize")
    p10, median, p90 = (float(v) for v in np.percentile(times_ms, [10, 50, 90]))
    return Timing(method, tuple(float(t) for t in times_ms), median, float(min(times_ms)),
                  float(max(times_ms)), _spread(p10, median, p90), sm_clock_mhz, mem_clock_mhz,
                  kernels_per_iteration)


def _spread(p10: float, median: float, p90: float) -> float:
    """(p90 - p10) / median; 0 when every time is 0 (no device work at all)."""
    if median > 0:
        return (p90 - p10) / median
    return 0.0 if p90 == p10 else math.inf


def l2_flush_buffer(l2_bytes: int, device: torch.device | str | int) -> FlushRows:
    """Flush buffers of twice `l2_bytes` each: one written, one read (see `_flush`)."""
    if l2_bytes <= 0:
        raise TimingError(f"L2 size must be positive, got {l2_bytes}")
    return _flush_buffer(2 * l2_bytes, device)


@dataclass(frozen=True)
class StopRule:
    """Time until the median is known well enough: at least `min_iterations`, then until the
    distribution-free confidence interval of the median (at `z`, 1.96: 95%) has a half-width
    of at most `rel_halfwidth` of the median, never past the cap (the `iterations` asked for).
    Checked every `chunk` iterations."""

    min_iterations: int = 20
    rel_halfwidth: float = 0.01
    chunk: int = 10
    z: float = 1.96


def median_halfwidth(times_ms: Sequence[float], z: float = 1.96) -> float:
    """Relative half-width of the order-statistic confidence interval of the median.

    With n samples, the ranks (n - z*sqrt(n))/2 and 1 + (n + z*sqrt(n))/2 bound the median at
    confidence ~Phi(z) whatever the distribution (the count below the median is
    Binomial(n, 1/2)); half their distance over the median is the relative precision."""
    n = len(times_ms)
    if n < 2:
        return math.inf
    ordered = sorted(times_ms)
    reach = z * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - reach) - 1)
    high = min(n - 1, math.ceil(n / 2 + reach))
    median = float(np.median(ordered))
    if median <= 0:
        return 0.0 if ordered[high] == ordered[low] else math.inf
    return (ordered[high] - ordered[low]) / 2 / median


def enough_iterations(times_ms: Sequence[float], rule: StopRule, cap: int) -> bool:
    """The loop-termination decision: stop once the median is known to `rule`, or at `cap`."""
    if len(times_ms) >= cap:
        return True
    if len(times_ms) < rule.min_iterations:
        return False
    return median_halfwidth(times_ms, rule.z) <= rule.rel_halfwidth


def time_iterations(run_iteration: Callable[[int], None], iterations: int, warmup: int,
                    method: str = "kernel", flush_bytes: int | None = None,
                    before_iteration: Callable[[int], None] | None = None,
                    after_iteration: Callable[[int], None] | None = None,
                    stop: StopRule | None = None) -> Timing:
    """Time `iterations` calls after `warmup` untimed ones; with `stop`, as few as its rule
    allows and at most `iterations` (the timed calls come in chunks, each timed like a whole
    run: a profiler session per chunk for "kernel").

    `run_iteration(i)` and `before_iteration(i)` get i = 0 .. warmup + n - 1 (warm-up first,
    n = the timed count), so every call can have its own inputs. `flush_bytes` is the size of
    the buffer written before each iteration: None means twice the device's L2 on CUDA and no
    flush on the CPU; 0 means no flush (warm-cache timing). `after_iteration(i)` runs right
    after call i's time is taken (after its device-wide synchronize on the GPU): the harness
    hands the outputs over there, the moment the call has returned. On the CPU, a
    `run_iteration` that returns a float gives the `time.perf_counter()` reading taken when its
    call returned: the window ends there, not after the caller's own checks.
    """
    _check_loop(method, iterations, warmup)
    tools = _Tools.made(method, flush_bytes)
    if stop is None or stop.min_iterations >= iterations:
        return _time_fixed(run_iteration, iterations, warmup, method, tools, before_iteration,
                           after_iteration)
    first = max(stop.min_iterations, 1)
    timing = _time_fixed(run_iteration, first, warmup, method, tools, before_iteration,
                         after_iteration)
    chunks = (timing,)  # tuples, as every record of a time here: see `_time_cpu`
    times = timing.times_ms
    while not enough_iterations(times, stop, iterations):
        offset = warmup + len(times)
        count = min(stop.chunk, iterations - len(times))
        chunk = _time_fixed(run_iteration, count, 0, method, tools, before_iteration,
                            after_iteration, offset)
        chunks = (*chunks, chunk)
        times = (*times, *chunk.times_ms)
    return _joined(method, chunks)


def _joined(method: str, chunks: tuple[Timing, ...]) -> Timing:
    times = tuple(t for chunk in chunks for t in chunk.times_ms)
    kernels = [c.kernels_per_iteration for c in chunks if c.kernels_per_iteration is not None]
    weights = [len(c.times_ms) for c in chunks if c.kernels_per_iteration is not None]
    per_iteration = (sum(k * w for k, w in zip(kernels, weights)) / sum(weights)
                     if kernels else None)
    return summarize(method, times, _range(c.sm_clock_mhz for c in chunks),
                     _range(c.mem_clock_mhz for c in chunks), per_iteration)


def _range(ranges) -> tuple[float, float] | None:
    known = [r for r in ranges if r is not None]
    return (min(r[0] for r in known), max(r[1] for r in known)) if known else None


def _check_loop(method: str, iterations: int, warmup: int) -> None:
    if method not in METHODS:
        raise TimingError(f"unknown timing method {method!r} (methods: {', '.join(METHODS)})")
    if iterations < 1 or warmup < 0:
        raise TimingError(f"need iterations >= 1 and warmup >= 0, got {iterations}, {warmup}")
    if method != "cpu" and not torch.cuda.is_available():
        raise TimingError(f"timing method {method!r} needs a CUDA device; use method='cpu'")


class _Tools(NamedTuple):
    """What every chunk of one timed loop uses, made once per loop: the flush buffer (twice the
    L2, zeroed on the device) and the clock reader (an NVML initialisation and handle). A named
    tuple, as `Timing`: a call can reach the loop's frame, and `object.__setattr__` would hand a
    frozen dataclass's later chunks another buffer."""

    buffer: FlushRows | None  # None: no flush (the CPU without flush_bytes)
    reader: ClockReader | None

    @classmethod
    def made(cls, method: str, flush_bytes: int | None) -> _Tools:
        if method == "cpu":
            return cls(_flush_buffer(flush_bytes, "cpu") if flush_bytes else None, None)
        device = torch.device("cuda", torch.cuda.current_device())
        if flush_bytes is None:
            flush_bytes = 2 * torch.cuda.get_device_properties(device).L2_cache_size
        # With no flush a 4-byte write still marks where each iteration begins ("kernel").
        return cls(_flush_buffer(max(flush_bytes, 4), device), clock_reader(device))


def _time_fixed(run_iteration: Callable[[int], None], iterations: int, warmup: int,
                method: str, tools: _Tools,
                before_iteration: Callable[[int], None] | None,
                after_iteration: Callable[[int], None] | None = None, first: int = 0) -> Timing:
    """One chunk of a loop; `first` is the loop's index of its first call: the callbacks get
    first + i, and the flushes are numbered on from the chunk before (the buffer is the loop's:
    no flush writes the value the one before it wrote). The callbacks are called as given, not
    through wrappers made here: a function object made during the loop is one no check knows."""
    before = before_iteration or _nothing
    after = after_iteration or _nothing
    if method == "cpu":
        return _time_cpu(run_iteration, before, after, iterations, warmup, tools.buffer, first)
    sampler = ClockSampler(tools.reader)
    timers = {"kernel": _time_kernels, "events": _time_events, "graph": _time_graph}
    times, kernels = timers[method](run_iteration, before, after, iterations, warmup,
                                    tools.buffer, sampler, first)
    return summarize(method, times, sampler.sm_range(), sampler.mem_range(), kernels)


def _nothing(_: int) -> None:
    return None


class FlushRows(NamedTuple):
    """Two buffers of one size: `written` is written, `read` read, before every iteration;
    `layout`: where each began and how many elements it held when made (see `_flush`)."""

    written: torch.Tensor
    read: torch.Tensor
    layout: tuple[int, int, int]


def _flush_buffer(nbytes: int, device: torch.device | str | int) -> FlushRows:
    """Two separate tensors, each made and zeroed by ops the worker's guards watch
    (`aten::empty.memory_format`, `aten::fill_.Scalar`), never rows of one tensor: a row is a
    view (`buffer[0]`, aten::select), and a kernel a candidate registered over an op no guard
    dumps could hand the flush a few bytes of it to write and read, leaving the candidate's
    inputs in the L2 for its timed calls."""
    size = max(nbytes // 4, 1)
    written, read = (torch.empty(size, dtype=torch.int32, device=device).fill_(0)
                     for _ in range(2))
    return FlushRows(written, read, (written.data_ptr(), read.data_ptr(), size))


def _flush(rows: FlushRows, i: int) -> None:
    """Evict the L2 and leave it clean, with the two ops the guards watch: `fill_` and `amax`.

    Writing `written` evicts whatever the L2 held (a new value each time, so no write is a
    no-op), but leaves the L2 full of dirty lines, which the timed kernel would then pay to
    write back. Reading `read`, as large, pushes those write-backs into the flush and leaves
    only clean lines behind, as Nsight Compute's cache control does.

    A call can reach the loop's frames and the two tensors in them, and shrink either in place
    (`resize_`, `set_`, `as_strided_`): the flush would write and read a few bytes and leave
    the candidate's inputs in the L2. Each flush first checks that both still start where they
    did, hold as many elements and are dense (a few attribute reads, microseconds).
    """
    written, read, (written_at, read_at, size) = rows
    if (written.data_ptr() != written_at or read.data_ptr() != read_at
            or written.numel() != size or read.numel() != size
            or written.stride() != (1,) or read.stride() != (1,)):
        raise FlushTampered("the L2 flush's buffers were changed during the timed calls")
    written.fill_(i + 1)
    torch.amax(read)


def _time_cpu(run: Callable[[int], None], before: Callable[[int], None],
              after: Callable[[int], None], iterations: int, warmup: int,
              buffer: FlushRows | None, first: int) -> Timing:
    """The host's clock around each call. The times are kept in a tuple, never a list: a
    candidate's call can reach this frame (`sys._getframe`) and would scale a list of the
    earlier calls' times in place; a tuple held in a local can only be rebound, which takes a
    trace function, and the worker ends the moment anything but the harness sets one
    (harness/tracer_hook.py)."""
    times: tuple[float, ...] = ()
    clock = time.perf_counter  # bound before any call: see `_time_kernels`
    for i in range(warmup + iterations):
        before(first + i)
        if buffer is not None:
            _flush(buffer, first + i)
        start = clock()
        returned = run(first + i)
        ended = clock()
        if isinstance(returned, float) and start <= returned <= ended:
            ended = returned  # the moment the call returned, before the harness's checks
        elapsed_ms = (ended - start) * 1e3
        after(first + i)
        if i >= warmup:
            times = (*times, elapsed_ms)
    return summarize("cpu", times)


def _time_events(run: Callable[[int], None], before: Callable[[int], None],
                 after: Callable[[int], None], iterations: int, warmup: int, buffer: FlushRows,
                 sampler: ClockSampler, first: int) -> tuple[tuple[float, ...], None]:
    times: tuple[float, ...] = ()  # a tuple: see `_time_cpu`
    sync = torch.cuda.synchronize  # bound before any call: see `_time_kernels`
    for i in range(warmup + iterations):
        before(first + i)
        _flush(buffer, first + i)
        sync()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        stop, stopped = end.record, end.synchronize
        start.record()
        run(first + i)
        sync()  # side-stream work finishes before the end event
        stop()
        stopped()
        after(first + i)
        if i >= warmup:
            times = (*times, start.elapsed_time(end))
        _sample_clocks(sampler, i, warmup, iterations)
    return times, None


def _time_graph(run: Callable[[int], None], before: Callable[[int], None],
                after: Callable[[int], None], iterations: int, warmup: int, buffer: FlushRows,
                sampler: ClockSampler, first: int) -> tuple[tuple[float, ...], None]:
    """Warm-up runs eagerly (compiles, creates handles); each timed iteration is captured into its
    own graph, with its own inputs, and replayed once."""
    for i in range(warmup):
        before(first + i)
        _flush(buffer, first + i)
        run(first + i)
        torch.cuda.synchronize()
        after(first + i)
    times: tuple[float, ...] = ()  # a tuple: see `_time_cpu`
    for i in range(warmup, warmup + iterations):
        before(first + i)
        graph = _capture(run, first + i)
        _flush(buffer, first + i)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        after(first + i)
        times = (*times, start.elapsed_time(end))
        _sample_clocks(sampler, i, warmup, iterations)
    return times, None


def _sample_clocks(sampler: ClockSampler, i: int, warmup: int, iterations: int) -> None:
    """Read the clocks right after iteration i, while they are still at their loaded level, and
    keep the timed iterations' readings. A slow reader (nvidia-smi) reads only after the first
    and the last timed iteration."""
    sampler.sample(force=i in (warmup, warmup + iterations - 1), keep=i >= warmup)


def _capture(run: Callable[[int], None], i: int) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            run(i)
    except RuntimeError as exc:
        raise TimingError(f"iteration {i} cannot be captured in a CUDA graph: {exc}") from None
    return graph


def _time_kernels(run: Callable[[int], None], before: Callable[[int], None],
                  after: Callable[[int], None], iterations: int, warmup: int, buffer: FlushRows,
                  sampler: ClockSampler, first: int) -> tuple[tuple[float, ...], float]:
    from torch.profiler import record_function

    token = secrets.token_hex(8)  # a candidate cannot name its own work like the harness's
    setup_range, flush_range = f"solforge.setup.{token}", f"solforge.flush.{token}"
    total = warmup + iterations
    # Bound before any call: between a call's return and `after` (whose first act is the
    # guards' check) only these run, so a patch of the module's name that restores itself once
    # called would never be called here, and is still there when the check looks.
    sync, stop, stopped = torch.cuda.synchronize, _disable_profiler, _run_on_profiler_stop
    sync()
    _start_profiler()
    try:
        for i in range(total):
            with record_function(setup_range):
                before(first + i)
            with record_function(flush_range):
                _flush(buffer, first + i)
            sync()
            run(first + i)
            sync()
            with record_function(setup_range):
                after(first + i)
            _sample_clocks(sampler, i, warmup, iterations)
    finally:
        try:
            sync()  # the last hand-over's copies end inside the session
        finally:
            records = stop()
            stopped()
    events = records.events()
    kinds = [activity_of(e) for e in events]  # once: each pass below reads them
    spans = [DeviceSpan(e.start_ns(), e.end_ns(), e.linked_correlation_id())
             for e, kind in zip(events, kinds) if kind in DEVICE_WORK]
    markers = host_ids_in_ranges(events, flush_range, kinds)
    if len(markers) > total:
        raise ForgedRange(f"the profiler recorded {len(markers)} harness flush ranges for "
                          f"{total} iterations: something else opened a range under the "
                          f"harness's secret name")
    if len(markers) != total:
        raise TimingError(f"the profiler recorded {len(markers)} flush ranges for {total} "
                          f"iterations")
    setups = host_ids_in_ranges(events, setup_range, kinds)
    if len(setups) < 2 * total:
        raise TimingError(f"the profiler recorded {len(setups)} harness setup ranges for "
                          f"{2 * total}")
    if len(setups) > 2 * total:
        raise ForgedRange(f"the profiler recorded {len(setups)} harness setup ranges for "
                          f"{2 * total}: something else opened a range under the harness's "
                          f"secret name to hide its work from the timing")
    harness = set().union(*setups)
    groups = split_iterations(spans, markers, harness)[warmup:]
    times = tuple(window_ms(group) for group in groups)
    return times, sum(len(group) for group in groups) / len(groups)


def _start_profiler() -> None:
    """A Kineto session of host ops and device work, through the profiler's own functions.

    Not `torch.profiler.profile`: the loop's frame would hold that object, which a call can
    reach (`sys._getframe`), and the records are read from its attributes after the last call
    (`prof.profiler.kineto_results`), reached through more of them on the way out
    (`prof.profiler.__exit__`, its `action_map`): swapping one for an object that answers with
    scaled records changes no name the guards watch. Here the records come back from
    `_disable_profiler` into a local of the loop's frame, after the last call, which only a
    trace function could rebind (harness/tracer_hook.py stops any but the harness's).

    PyTorch's Python flag that a profiler is on is set as `profile` sets it (and cleared after
    the stop): Inductor's compiled code reads it to launch its kernels by the path that
    annotates them, so a torch.compile baseline or candidate runs as it did under `profile`,
    the way every recorded time was taken."""
    config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                            _ExperimentalConfig())
    activities = {ProfilerActivity.CPU, ProfilerActivity.CUDA}
    _prepare_profiler(config, activities)
    _run_on_profiler_start()
    _enable_profiler(config, activities)


def activity_of(event) -> str:
    """The kind of a profiler record, in Kineto's names ("kernel", "gpu_memcpy", "cpu_op", ...).

    PyTorch from 2.12 tells it (`activity_type`); older builds (2.11 on the GPU machine) do not,
    so the kind is read from the device type and the name: device records are kernels, memcpys
    or memsets (sync and wait records, and record_function ranges drawn on the device timeline,
    are not work); host records are runtime-API calls
    (cudaLaunchKernel, cuLaunchKernel: CUPTI's own correlation numbering) or torch ops and
    annotations.
    """
    if hasattr(event, "activity_type"):
        return event.activity_type()
    name = event.name()
    is_annotation = getattr(event, "is_user_annotation", None)
    annotated = name.startswith("solforge.") or (is_annotation is not None and is_annotation())
    if event.device_type() != DeviceType.CPU:
        if annotated:  # a record_function range drawn on the device timeline: not work
            return "gpu_user_annotation"
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        return "cuda_sync" if _SYNC_NAME.search(name) else "kernel"
    if _RUNTIME_NAME.match(name):
        return "cuda_runtime"
    return "user_annotation" if annotated else "cpu_op"


def host_ids_in_ranges(events: Sequence, range_name: str,
                       kinds: Sequence[str] | None = None) -> list[set[int]]:
    """For each profiler range named `range_name` (in time order): the correlation ids of the
    host ops that ran inside it on the range's own thread, the range itself included. `kinds`:
    each event's `activity_of`, when the caller has them (a loop's records number thousands)."""
    if kinds is None:
        kinds = [activity_of(e) for e in events]
    ranges = sorted((e for e, kind in zip(events, kinds)
                     if kind == "user_annotation" and e.name() == range_name),
                    key=lambda e: e.start_ns())
    if not ranges:
        return []
    thread = ranges[0].start_thread_id()
    host_ops = sorted((e for e, kind in zip(events, kinds)
                       if kind in TORCH_OPS and e.start_thread_id() == thread),
                      key=lambda e: e.start_ns())
    starts = [op.start_ns() for op in host_ops]
    found = []
    for annotation in ranges:
        first = bisect_left(starts, annotation.start_ns())
        last = bisect_right(starts, annotation.end_ns())
        ids = {op.correlation_id() for op in host_ops[first:last]}
        found.append({i for i in ids if i > 0})
    return found


def split_iterations(spans: Sequence[DeviceSpan], markers: Sequence[set[int]],
                     harness_ids: set[int]) -> list[list[DeviceSpan]]:
    """The candidate's device work per iteration.

    `markers[k]` holds the host-op ids of iteration k's flush; the earliest device record they
    launched marks where iteration k begins. Records launched by the harness (`harness_ids`, or a
    marker's ids) are left out; every other record goes to the last iteration whose marker
    started at or before it. Records before the first marker are left out.
    """
    starts = []
    for k, ids in enumerate(markers):
        own = [span.start_ns for span in spans if span.linked_id in ids]
        if not own:
            raise TimingError(f"the profiler recorded no flush kernel for iteration {k}; "
                              f"kernel records are missing (is CUPTI available?)")
        starts.append(min(own))
    if starts != sorted(starts):
        raise TimingError("flush kernels were recorded out of order; timing cannot be trusted")
    excluded = set(harness_ids).union(*markers) - {0}
    groups: list[list[DeviceSpan]] = [[] for _ in markers]
    for span in spans:
        if span.linked_id in excluded:
            continue
        k = bisect_right(starts, span.start_ns) - 1
        if k >= 0:
            groups[k].append(span)
    return groups


def window_ms(spans: Sequence[DeviceSpan]) -> float:
    """First start to last end, in ms; 0 for an iteration that put no work on the device."""
    if not spans:
        return 0.0
    return (max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e6
