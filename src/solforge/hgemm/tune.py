"""The tuner: for each shape, find the fastest correct kernel and settings, time it beside the
baselines, and append the result to the table, within a wall-clock budget.

Per shape:
1. operands (standard normal) and their float32 product; each baseline run once and checked
   (a baseline that raises is noted and left out of this shape's timings);
2. headroom: torch.matmul's kernel-only time against the roofline floor of the shape
   (roofline.py, peaks from the GPU's hardware profile); it sets how many candidates the shape
   earns, none where cuBLAS is within `skip_headroom` of the floor;
3. candidates: the shortlist of space.py, led by the winners of the nearest tuned shapes
   (retrieval in the loop: what won next door is tried first);
4. correctness: each candidate writes a NaN-poisoned output once; one over the tolerance
   (space.tolerance) or holding NaN is out, as is one that fails to compile or launch;
5. screening: the correct candidates interleaved in one profiler session, kernel-only time,
   `screen_rounds` calls each (a graph's first replay scatters by microseconds, more than
   the candidates of a small shape differ); the `finalists` fastest go on;
6. final: finalists and baselines interleaved, kernel-only time (profiler) over `final_rounds`;
   the best finalist and the baselines in CUDA-graph time; then the best finalist and
   torch.matmul in server mode (Poisson-spaced calls), kernel-only, graph and end to end
   (events: one call between two synchronizes, its host launch cost included);
7. the choice per mode (mode_choices): eager calls use the kernel only where it beat
   torch.matmul beyond `noise` in kernel-only time, back to back and in server mode, and end
   to end in server mode (a Triton launch costs the host tens of microseconds more than
   torch.matmul's: a kernel a few microseconds faster on the GPU loses where the GPU waits
   for the host); graph captures only where it did so in graph time, back to back and in
   server mode (a replay has no per-kernel host cost).

Resumable: shapes already in the table are skipped, each finished shape is appended at once,
and the budget check before each shape uses an estimate of its time (calibrated on the shapes
this call has done), so a call stops cleanly before its limit. A shape that was started twice
without finishing (each start is logged beside the table) is recorded as failed and passed, so
one shape that kills the process cannot stall the tuning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.hgemm import kernels
from solforge.hgemm.baselines import BASELINES, BaselineSet, baseline_checks, make_baselines
from solforge.hgemm.budget import (
    CALL_OVERHEAD_S,
    REFERENCE_FLOPS,
    SHAPE_OVERHEAD_S,
    SUSTAINED_FLOPS,
    BudgetReport,
    run_budgeted,
)
from solforge.hgemm.measure import (
    Call,
    Measurer,
    Operands,
    failure,
    median_ms,
    poisoned_output,
    relative_error,
)
from solforge.hgemm.retrieve import neighbour_configs
from solforge.hgemm.roofline import (
    Roof,
    bytes_moved,
    candidates_for,
    headroom,
    roof_of_device,
)
from solforge.hgemm.space import SM_COUNT, Config, Shape, shortlist, tolerance
from solforge.hgemm.table import (
    ConfigTrial,
    MethodTimes,
    Table,
    TableEntry,
    append_entry,
    append_jsonl,
    environment,
    load_table,
    read_jsonl,
)

Log = Callable[[str], None]


@dataclass(frozen=True)
class TuneSettings:
    shortlist: int = 16  # candidates for a shape far from the roofline (fewer nearer to it)
    neighbours: int = 3  # winners of the nearest tuned shapes put first
    finalists: int = 2
    probe_rounds: int = 3  # torch.matmul kernel-only calls that measure the headroom
    screen_rounds: int = 3
    final_rounds: int = 10
    server_gap_ms: float = 0.5  # mean Poisson gap of the server-mode validation
    noise: float = 0.02  # the margin a kernel must win by (the repeatability seen on the H200)
    skip_headroom: float = 0.05  # cuBLAS this close to the roofline: no search
    full_headroom: float = 0.5  # this far or farther: the whole shortlist
    autotune_iterations: int = 5  # per cuBLASLt algorithm
    baselines: tuple[str, ...] = BASELINES


def estimate_seconds(shape: Shape, settings: TuneSettings = TuneSettings()) -> float:
    """Device-machine seconds to tune `shape` (before calibration)."""
    baselines = len(settings.baselines)
    rounds = 1 + settings.final_rounds
    calls = (1 + settings.probe_rounds + settings.shortlist * (2 + settings.screen_rounds)
             + (settings.finalists + baselines) * rounds  # offline kernel-only
             + (1 + baselines) * rounds  # offline graph
             + 2 * 3 * rounds  # server mode, kernel-only, graph, events: tuned and torch
             + 16 * settings.autotune_iterations)  # the autotuned plan's algorithms
    gaps = 2 * 3 * rounds * settings.server_gap_ms / 1e3
    return (SHAPE_OVERHEAD_S + calls * (CALL_OVERHEAD_S + shape.flops / SUSTAINED_FLOPS)
            + shape.flops / REFERENCE_FLOPS + gaps)


def progress_path(table_path: Path) -> Path:
    """The log of shapes started, beside the table."""
    return table_path.with_name(table_path.name + ".started")


def start_counts(table_path: Path) -> dict[str, int]:
    """How many times each shape was started (finished ones included)."""
    counts: dict[str, int] = {}
    for record in read_jsonl(progress_path(table_path))[0]:
        counts[record["started"]] = counts.get(record["started"], 0) + 1
    return counts


def tune(shapes: Sequence[Shape], table_path: Path, measurer: Measurer,
         settings: TuneSettings = TuneSettings(), budget_s: float = float("inf"),
         clock: Callable[[], float] = time.monotonic, log: Log | None = None,
         sm_count: int = SM_COUNT) -> BudgetReport:
    """Tune every shape not yet in the table at `table_path`, until the budget runs out."""
    table_path = Path(table_path)
    table = load_table(table_path)
    started = start_counts(table_path)

    def tune_one(shape: Shape) -> None:
        entry = tune_and_record(shape, table_path, table, started, measurer, settings,
                                sm_count, clock)
        if log:
            log(summary_line(entry))

    pending = [shape for shape in shapes if table.get(shape) is None]
    return run_budgeted(pending, tune_one, lambda shape: estimate_seconds(shape, settings),
                        budget_s, clock)


PROBE_BATCH_BYTES = 8 * 2**30  # operands, outputs and references held for one probe session


def probe_headrooms(shapes: Sequence[Shape], measurer: Measurer, roof: Roof,
                    rounds: int = 3, budget_s: float = float("inf"),
                    clock: Callable[[], float] = time.monotonic) -> dict[str, float]:
    """Each shape's headroom (roofline.headroom of torch.matmul's kernel-only time), so a pass
    can tune the shapes with the most to win first. Many shapes share one profiler session
    (their calls interleaved), so the probe of a thousand shapes costs seconds, not minutes."""
    found: dict[str, float] = {}
    began = clock()
    batch: list[tuple[Shape, Call]] = []
    held = 0

    def time_batch() -> None:
        timed = measurer.time({shape.key: call for shape, call in batch}, "kernel", rounds)
        for shape, _ in batch:
            ms = median_ms(timed.get(shape.key))
            if ms is not None:
                found[shape.key] = headroom(shape, ms / 1e3, roof)
        batch.clear()

    for shape in shapes:
        if clock() - began > budget_s:
            break
        operands = measurer.operands(shape)
        out = torch.empty((shape.m, shape.n), dtype=operands.a.dtype, device=operands.a.device)
        batch.append((shape, _torch_call(operands.a, operands.b, out)))
        held += bytes_moved(shape) + 4 * shape.m * shape.n
        if held > PROBE_BATCH_BYTES:
            time_batch()
            held = 0
    if batch:
        time_batch()
    return found


def _torch_call(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> Call:
    return lambda: torch.matmul(a, b, out=out)


def tune_and_record(shape: Shape, table_path: Path, table: Table, started: dict[str, int],
                    measurer: Measurer, settings: TuneSettings = TuneSettings(),
                    sm_count: int = SM_COUNT, clock: Callable[[], float] = time.monotonic,
                    operands: Operands | None = None,
                    baselines: BaselineSet | None = None) -> TableEntry:
    """Tune one shape, log its start beside the table, append its entry and add it to `table`;
    a shape already started twice is recorded as failed instead (module docstring)."""
    if started.get(shape.key, 0) >= 2:
        note = "tuning this shape was started twice and never finished (a crash or time limit)"
        entry = TableEntry(shape, None, False, {}, environment=environment(), notes=(note,))
    else:
        started[shape.key] = started.get(shape.key, 0) + 1
        append_jsonl(progress_path(table_path), {"started": shape.key})
        entry = tune_shape(shape, measurer, table, settings, sm_count, clock, operands,
                           baselines)
    append_entry(table_path, entry)
    table.add(entry)
    return entry


def tune_shape(shape: Shape, measurer: Measurer, table: Table,
               settings: TuneSettings = TuneSettings(), sm_count: int = SM_COUNT,
               clock: Callable[[], float] = time.monotonic, operands: Operands | None = None,
               baselines: BaselineSet | None = None, roof: Roof | None = None) -> TableEntry:
    """One shape, steps 1-7 of the module docstring. `operands` and `baselines` may be shared
    with the benchmark of the same shape (they are made here when not given)."""
    began = clock()
    operands = operands or measurer.operands(shape)
    found = baselines or make_baselines(operands, settings.baselines,
                                        settings.autotune_iterations)
    try:
        errors, working, notes = baseline_checks(found, measurer, operands)
        room = _headroom(shape, working.get("torch"), measurer, settings,
                         roof or roof_of_device(measurer.device))
        size = candidates_for(settings.full_headroom if room is None else room,
                              settings.shortlist, skip_below=settings.skip_headroom,
                              full_at=settings.full_headroom)
        if room is not None:
            notes.append(f"torch.matmul {room:.0%} above the roofline floor: "
                         f"{size} candidates")
        extra = neighbour_configs(table, shape, settings.neighbours)
        configs = shortlist(shape, sm_count, extra, size) if size else []
        out, results = _check_candidates(shape, configs, measurer, operands)
        correct = [config for config in configs if results[config].failure is None]
        screen = _screen(correct, operands.a, operands.b, out, measurer, settings)
        for config in correct:
            results[config] = _with_screen(results[config], screen.get(config))
        finalists = sorted((c for c in correct if screen.get(c) is not None),
                           key=lambda c: screen[c])[: settings.finalists]
        times, best = _final(finalists, working, errors, out, measurer, settings, operands,
                             results)
    finally:
        if baselines is None:
            found.close()
    eager, graph = mode_choices(times["tuned"], times.get("torch", MethodTimes()),
                                settings.noise)
    return TableEntry(shape, best, best is not None and eager, times,
                      tuple(results[c] for c in configs), environment(), clock() - began,
                      tuple(found.notes + notes), best is not None and graph)


def _headroom(shape: Shape, torch_call: Call | None, measurer: Measurer,
              settings: TuneSettings, roof: Roof) -> float | None:
    """torch.matmul's distance above the roofline floor (roofline.py), None if not timed."""
    if torch_call is None:
        return None
    probe = median_ms(measurer.time({"torch": torch_call}, "kernel",
                                    settings.probe_rounds).get("torch"))
    return None if probe is None else headroom(shape, probe / 1e3, roof)


def _check_candidates(shape: Shape, configs: list[Config], measurer: Measurer,
                      operands: Operands) -> tuple[torch.Tensor, dict[Config, ConfigTrial]]:
    """Step 3. The candidates share one output (poisoned before each), which the timed calls
    then overwrite: C of the largest prefill shape is 5 GB."""
    out = poisoned_output(shape, measurer.device)
    results = {}
    for config in configs:
        out.fill_(float("nan"))
        if not kernels.runs_here(config, measurer.device):
            reason = "the CUDA extension cannot be built or loaded here"
        else:
            reason = _run_once(config, operands.a, operands.b, out, measurer)
        error = None if reason else relative_error(out, operands.reference)
        if error is not None and error > tolerance(shape):
            reason = f"error {error:.2e} over the tolerance {tolerance(shape):.2e}"
        results[config] = ConfigTrial(config, error=error, failure=reason)
    return out, results


def _run_once(config: Config, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
              measurer: Measurer) -> str | None:
    try:
        kernels.launch(config, a, b, out)
        measurer.synchronize()
    except Exception as exc:  # compile errors, resource errors, launch errors: all rule it out
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def _screen(correct: list[Config], a, b, out: torch.Tensor, measurer: Measurer,
            settings: TuneSettings) -> dict[Config, float | None]:
    calls = {config.label: _launcher(config, a, b, out) for config in correct}
    timed = measurer.time(calls, "kernel", settings.screen_rounds)
    return {config: median_ms(timed.get(config.label)) for config in correct}


def _with_screen(candidate: ConfigTrial, screen_ms: float | None) -> ConfigTrial:
    failure_text = candidate.failure
    if screen_ms is None and failure_text is None:
        failure_text = "could not be timed"
    return ConfigTrial(candidate.config, screen_ms, candidate.error, failure_text)


def _launcher(config: Config, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
    return lambda: kernels.launch(config, a, b, out)


def _final(finalists: list[Config], working: dict[str, Call],
           errors: dict[str, float | None], out: torch.Tensor, measurer: Measurer,
           settings: TuneSettings, operands: Operands,
           results: dict[Config, ConfigTrial]) -> tuple[dict[str, MethodTimes], Config | None]:
    """Step 5: the finalists and the baselines in kernel-only time; the best finalist and the
    baselines in graph time; then the best finalist and torch.matmul in server mode (Poisson
    gaps), kernel-only, graph and end to end (events). The times of each method and the best
    finalist. The tuned call is the kernel's launch; the dispatcher's lookup, a few
    microseconds more, is in the benchmark's events timing, which demotes what it loses."""
    calls = {c.label: _launcher(c, operands.a, operands.b, out) for c in finalists}
    kernel = measurer.time({**calls, **working}, "kernel", settings.final_rounds)
    timed = [c for c in finalists if median_ms(kernel.get(c.label)) is not None]
    best = min(timed, key=lambda c: median_ms(kernel[c.label])) if timed else None
    pair = {**({"tuned": calls[best.label]} if best else {}),
            **({"torch": working["torch"]} if "torch" in working else {})}
    graph = measurer.time({**working, **pair}, "graph", settings.final_rounds)
    server: dict[str, dict] = {"kernel": {}, "graph": {}, "events": {}}
    if best is not None and "torch" in pair:
        for timing in server:
            server[timing] = measurer.time(pair, timing, settings.final_rounds,
                                           settings.server_gap_ms / 1e3)
    times = {}
    for name in errors:
        if name not in working:
            times[name] = MethodTimes(note="failed at this shape (see the notes)")
            continue
        times[name] = _method_times(kernel.get(name), graph.get(name), errors[name],
                                    *(server[timing].get(name) for timing in server))
    if best is None:
        times["tuned"] = MethodTimes(note="no candidate was searched, correct and timed")
    else:
        times["tuned"] = _method_times(kernel.get(best.label), graph.get("tuned"),
                                       results[best].error,
                                       *(server[timing].get("tuned") for timing in server))
    return times, best


def _method_times(kernel, graph, error: float | None, server_kernel=None,
                  server_graph=None, server_events=None) -> MethodTimes:
    return MethodTimes(median_ms(kernel), median_ms(graph), error,
                       failure(kernel) or failure(graph) or failure(server_kernel)
                       or failure(server_graph) or failure(server_events),
                       median_ms(server_kernel), median_ms(server_graph),
                       median_ms(server_events))


TIMINGS = {"eager": ("kernel", "server_kernel", "server_events"),
           "graph": ("graph", "server_graph")}


def wins(tuned: float | None, base: float | None, noise: float) -> bool:
    """Faster than `base` by more than the noise (False when either was not measured)."""
    return tuned is not None and base is not None and tuned <= base * (1 - noise)


def mode_choices(tuned: MethodTimes, torch_times: MethodTimes, noise: float
                 ) -> tuple[bool, bool]:
    """The dispatcher's rule, per mode it can tell apart: eager calls run the kernel only where
    it beat torch.matmul beyond the noise in kernel-only time back to back and in server mode,
    and end to end in server mode (host launch cost included); graph captures only where it
    did so in graph replays, back to back and in server mode."""
    return tuple(all(wins(getattr(tuned, f"{t}_ms"), getattr(torch_times, f"{t}_ms"), noise)
                     for t in TIMINGS[mode]) for mode in ("eager", "graph"))


def kernel_wins(tuned: MethodTimes, torch_times: MethodTimes, noise: float) -> bool:
    """Whether eager calls run the kernel (mode_choices)."""
    return mode_choices(tuned, torch_times, noise)[0]


def summary_line(entry: TableEntry) -> str:
    """One line for a tuned shape: the tuned kernel's speedup and the dispatcher's choice."""
    tuned, base = entry.time("tuned"), entry.time("torch")
    ratio = f"{base / tuned:5.2f}x" if tuned and base else "  n/a"
    choice = entry.best.label if entry.use_kernel and entry.best else "torch.matmul"
    return f"{entry.shape.key:40s} {ratio} vs torch  -> {choice}  ({entry.seconds:.1f} s)"
