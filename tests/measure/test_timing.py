"""The timing primitives: statistics, CPU timing, kernel attribution, and GPU behaviour."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from solforge.hardware import datasheet_for_device
from solforge.measure.clocks import ClockSampler
from solforge.measure.timing import (
    DeviceSpan,
    FlushTampered,
    TimingError,
    host_ids_in_ranges,
    l2_flush_buffer,
    split_iterations,
    summarize,
    time_iterations,
    window_ms,
)


def test_summary_statistics():
    timing = summarize("cpu", [float(t) for t in range(1, 11)])
    assert (timing.median_ms, timing.min_ms, timing.max_ms) == (5.5, 1.0, 10.0)
    # numpy's linear percentiles: p10 = 1.9, p90 = 9.1
    assert timing.spread == pytest.approx((9.1 - 1.9) / 5.5)
    assert summarize("kernel", [0.0, 0.0]).spread == 0.0
    with pytest.raises(TimingError):
        summarize("cpu", [])


def test_cpu_method_runs_warmup_then_timed_iterations_in_order():
    calls = []
    timing = time_iterations(lambda i: calls.append(("run", i)), iterations=3, warmup=2,
                             method="cpu", before_iteration=lambda i: calls.append(("before", i)))
    assert calls == [(step, i) for i in range(5) for step in ("before", "run")]
    assert timing.method == "cpu"
    assert len(timing.times_ms) == 3
    assert timing.sm_clock_mhz is None and timing.kernels_per_iteration is None


def test_cpu_method_measures_the_call_and_not_the_setup():
    timing = time_iterations(lambda i: time.sleep(0.002), iterations=5, warmup=1, method="cpu",
                             before_iteration=lambda i: time.sleep(0.01), flush_bytes=1 << 20)
    assert 2.0 <= timing.median_ms < 10.0


def test_bad_arguments():
    with pytest.raises(TimingError, match="unknown timing method"):
        time_iterations(lambda i: None, 5, 0, method="stopwatch")
    with pytest.raises(TimingError, match="iterations >= 1"):
        time_iterations(lambda i: None, 0, 0, method="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_device_methods_need_cuda():
    with pytest.raises(TimingError, match="needs a CUDA device"):
        time_iterations(lambda i: None, 5, 0, method="kernel")


def test_flush_buffer_is_twice_the_l2():
    rows = l2_flush_buffer(1 << 20, "cpu")  # a row written and a row read, each twice the L2
    assert rows.written.nbytes == rows.read.nbytes == 2 << 20
    assert rows.written.untyped_storage().data_ptr() != rows.read.untyped_storage().data_ptr()
    assert not rows.written.any() and not rows.read.any()
    with pytest.raises(TimingError, match="positive"):
        l2_flush_buffer(0, "cpu")


@dataclass
class _FakeReader:
    cheap: bool
    mhz: float = 1980.0
    reads: int = 0

    def read(self):
        self.reads += 1
        return self.mhz, 2619.0


def test_clock_sampler_keeps_what_it_is_told_and_spares_slow_readers():
    fast = ClockSampler(_FakeReader(cheap=True))
    fast.sample(keep=False)  # a warm-up iteration: read, not kept
    fast.reader.mhz = 1755.0
    fast.sample()
    fast.reader.mhz = 1830.0
    fast.sample()
    assert fast.reader.reads == 3
    assert fast.sm_range() == (1755.0, 1830.0)
    assert fast.mem_range() == (2619.0, 2619.0)
    slow = ClockSampler(_FakeReader(cheap=False))
    slow.sample()
    slow.sample(force=True)
    assert slow.reader.reads == 1
    assert ClockSampler(None).sm_range() is None


def _span(start, end, linked):
    return DeviceSpan(start, end, linked)


def test_split_iterations_charges_all_streams_and_late_threads():
    markers = [{1}, {2}, {3}]  # host ops of each iteration's flush
    spans = [
        _span(10, 40, 0),  # before the first flush: predates the measurement
        _span(100, 140, 1),  # flush 0
        _span(150, 300, 20),  # iteration 0, main stream
        _span(200, 900, 21),  # iteration 0, side stream, ends late
        _span(950, 990, 10),  # harness setup of iteration 1
        _span(1000, 1040, 2),  # flush 1
        _span(1060, 1100, 22),  # iteration 1
        _span(1500, 1800, 0),  # a thread's kernel launched after iteration 1 ended
        _span(2000, 2040, 3),  # flush 2: iteration 2 puts nothing on the device
    ]
    groups = split_iterations(spans, markers, harness_ids={10})
    assert [[s.linked_id for s in g] for g in groups] == [[20, 21], [22, 0], []]
    assert [window_ms(g) for g in groups] == [pytest.approx(750e-6), pytest.approx(740e-6), 0.0]


def test_split_iterations_refuses_missing_or_disordered_markers():
    with pytest.raises(TimingError, match="no flush kernel"):
        split_iterations([_span(100, 140, 1)], [{1}, {2}], harness_ids=set())
    with pytest.raises(TimingError, match="out of order"):
        split_iterations([_span(500, 540, 1), _span(100, 140, 2)], [{1}, {2}], harness_ids=set())


def test_host_ids_in_ranges_on_real_profiler_records():
    x = torch.ones(4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("solforge.test"):
            x.add_(1)
        x.mul_(2)
        with record_function("solforge.test"):
            x.sub_(1)
    events = prof.profiler.kineto_results.events()
    names = {e.correlation_id(): e.name() for e in events}
    found = [{names[i] for i in ids} for ids in host_ids_in_ranges(events, "solforge.test")]
    assert len(found) == 2
    assert {"solforge.test", "aten::add_"} <= found[0]
    assert {"solforge.test", "aten::sub_"} <= found[1]
    assert "aten::mul_" not in found[0] | found[1]  # ran between the ranges


@dataclass(frozen=True)
class _Record:
    kind: str
    label: str
    start: int
    end: int
    thread: int
    ident: int

    def activity_type(self):
        return self.kind

    def name(self):
        return self.label

    def start_ns(self):
        return self.start

    def end_ns(self):
        return self.end

    def start_thread_id(self):
        return self.thread

    def correlation_id(self):
        return self.ident


def test_host_ids_in_ranges_ignores_other_threads_and_runtime_records():
    events = [
        _Record("user_annotation", "r", 100, 200, 1, 5),
        _Record("cpu_op", "aten::fill_", 110, 120, 1, 6),
        _Record("cpu_op", "aten::mm", 130, 140, 2, 7),  # a candidate's thread, same moment
        _Record("cuda_runtime", "cudaLaunchKernel", 112, 118, 1, 8),  # CUPTI's numbering
        _Record("cpu_op", "aten::add", 300, 310, 1, 9),  # after the range
    ]
    assert host_ids_in_ranges(events, "r") == [{5, 6}]


# ---- GPU -----------------------------------------------------------------------------------


def _spin_cycles() -> int:
    return 1_000_000  # torch.cuda._sleep: about 0.5 ms at 2 GHz


@pytest.mark.gpu
def test_copy_kernel_time_matches_bytes_over_bandwidth():
    source = torch.randn(2**28, device="cuda")  # 1 GiB
    target = torch.empty_like(source)
    timing = time_iterations(lambda i: target.copy_(source), iterations=20, warmup=3)
    assert timing.kernels_per_iteration == 1.0  # flush and setup kernels are not counted
    rate = 2 * source.nbytes / (timing.median_ms * 1e-3)  # read + write
    sheet = datasheet_for_device(torch.cuda.get_device_name())
    ceiling = sheet.dram_bytes_per_s if sheet else 20e12
    assert 0.5 * ceiling < rate <= ceiling


@pytest.mark.gpu
def test_kernel_time_leaves_out_launch_cost():
    x = torch.ones(1024, device="cuda")
    kernel = time_iterations(lambda i: x.add_(1), iterations=50, warmup=5)
    events = time_iterations(lambda i: x.add_(1), iterations=50, warmup=5, method="events")
    assert kernel.median_ms < events.median_ms


@pytest.mark.gpu
def test_setup_work_is_not_timed():
    x = torch.ones(1024, device="cuda")
    big = torch.empty(2**28, device="cuda")
    timing = time_iterations(lambda i: x.add_(1), iterations=20, warmup=2,
                             before_iteration=lambda i: big.fill_(i))
    assert timing.kernels_per_iteration == 1.0
    assert timing.median_ms < 0.05


@pytest.mark.gpu
def test_side_stream_work_is_counted():
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()

    def spin_on_main(i):
        torch.cuda._sleep(_spin_cycles())

    def spin_on_side(i):
        x.add_(1)
        with torch.cuda.stream(side):
            torch.cuda._sleep(_spin_cycles())  # never joined to the main stream

    alone = time_iterations(spin_on_main, iterations=10, warmup=2)
    hidden = time_iterations(spin_on_side, iterations=10, warmup=2)
    assert hidden.median_ms >= 0.9 * alone.median_ms
    assert hidden.kernels_per_iteration == 2.0


@pytest.mark.gpu
def test_work_from_another_thread_is_counted_even_when_it_starts_late():
    threads: list[threading.Thread] = []

    def launch_later():
        time.sleep(0.002)  # after the iteration's synchronize has returned
        with torch.cuda.stream(torch.cuda.Stream()):
            torch.cuda._sleep(_spin_cycles())

    def run(i):
        threads.append(threading.Thread(target=launch_later))
        threads[-1].start()

    def join_previous(i):
        if threads:
            threads[-1].join()

    alone = time_iterations(lambda i: torch.cuda._sleep(_spin_cycles()), 10, 2)
    late = time_iterations(run, iterations=10, warmup=2, before_iteration=join_previous)
    threads[-1].join()
    # Each spin lands before the next iteration's flush; the last one may miss the profiler.
    assert min(late.times_ms[:-1]) >= 0.9 * alone.median_ms


@pytest.mark.gpu
def test_repeated_runs_agree_within_three_percent():
    source = torch.randn(2**26, device="cuda")  # 256 MiB: ~0.1 ms to copy
    target = torch.empty_like(source)
    first = time_iterations(lambda i: target.copy_(source), iterations=50, warmup=5)
    second = time_iterations(lambda i: target.copy_(source), iterations=50, warmup=5)
    assert first.median_ms > 0.02
    assert second.median_ms == pytest.approx(first.median_ms, rel=0.03)


@pytest.mark.gpu
def test_graph_and_event_methods_bracket_the_kernel_time():
    source = torch.randn(2**26, device="cuda")
    target = torch.empty_like(source)
    kernel = time_iterations(lambda i: target.copy_(source), iterations=20, warmup=3)
    graph = time_iterations(lambda i: target.copy_(source), iterations=20, warmup=3,
                            method="graph")
    events = time_iterations(lambda i: target.copy_(source), iterations=20, warmup=3,
                             method="events")
    assert 0.9 * kernel.median_ms <= graph.median_ms <= 2 * kernel.median_ms
    assert events.median_ms >= 0.9 * kernel.median_ms
    for timing in (kernel, graph, events):
        if timing.sm_clock_mhz is not None:
            low, high = timing.sm_clock_mhz
            assert 0 < low <= high


_SHRINKS = {
    "resize_": lambda t: t.resize_(1),
    "as_strided_": lambda t: t.as_strided_(t.shape, (0,)),
    "set_": lambda t: t.set_(torch.empty(t.shape, dtype=t.dtype).untyped_storage()),
}


@pytest.mark.parametrize("shrink", list(_SHRINKS))
def test_a_call_that_changes_the_flush_buffers_in_place_is_caught(shrink):
    """A call can reach the loop's frame and the flush's tensors in it: shrunk, re-strided to
    one element or moved, the next flush stops the loop instead of leaving the L2 warm."""
    import sys

    def run(i: int) -> None:
        frame = sys._getframe(1)
        while frame.f_code.co_name != "_time_cpu":
            frame = frame.f_back
        if i == 2:
            _SHRINKS[shrink](frame.f_locals["buffer"].read)

    with pytest.raises(FlushTampered, match="flush"):
        time_iterations(run, iterations=5, warmup=1, method="cpu", flush_bytes=4096)
    flushed = time_iterations(lambda i: None, iterations=5, warmup=1, method="cpu",
                              flush_bytes=4096)
    assert len(flushed.times_ms) == 5  # an honest loop with the same flush


def test_the_kernel_timers_session_hands_its_records_to_the_caller():
    """The kernel timer starts and stops its profiler session with the profiler's own
    functions: the records come back from the stop, with the harness's ranges and the host ops
    inside them (no object that a call could reach holds them in between)."""
    from torch.autograd import profiler as autograd_profiler

    from solforge.measure import timing

    timing._start_profiler()
    try:
        with record_function("solforge.flush.test"):
            torch.ones(4).fill_(2.0)
        # what Inductor's compiled code reads to launch as it does under `profile`
        assert autograd_profiler._is_profiler_enabled
    finally:
        records = timing._disable_profiler()
        timing._run_on_profiler_stop()
    assert not autograd_profiler._is_profiler_enabled
    events = records.events()
    ranges = host_ids_in_ranges(events, "solforge.flush.test")
    assert len(ranges) == 1 and len(ranges[0]) >= 2  # the range and the ops inside it
