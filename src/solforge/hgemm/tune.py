"""The tuner: for each shape, find the fastest correct kernel and settings, time it beside the
baselines, and append the result to the table, within a wall-clock budget.

Per shape:
1. operands (standard normal) and their float32 product;
2. candidates: the shortlist of space.py, led by the winners of the nearest tuned shapes
   (retrieval in the loop: what won next door is tried first);
3. correctness: each candidate writes a NaN-poisoned output once; one over the tolerance
   (space.tolerance) or holding NaN is out, as is one that fails to compile or launch;
4. screening: the correct candidates interleaved in CUDA-graph replay (no profiler session
   needed), `screen_rounds` calls each; the `finalists` fastest go on;
5. final: finalists and baselines interleaved, kernel-only time (profiler) over `final_rounds`;
   then the best finalist and the baselines in CUDA-graph time;
6. the choice: the kernel is used only where it beat torch.matmul by more than `noise` in
   kernel-only time and was no slower (beyond noise) in graph time, and could be captured.

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
from solforge.hgemm.baselines import BASELINES, BaselineSet, make_baselines
from solforge.hgemm.budget import (
    CALL_OVERHEAD_S,
    REFERENCE_FLOPS,
    SHAPE_OVERHEAD_S,
    SUSTAINED_FLOPS,
    BudgetReport,
    run_budgeted,
)
from solforge.hgemm.measure import (
    Measurer,
    Operands,
    failure,
    median_ms,
    poisoned_output,
    relative_error,
)
from solforge.hgemm.retrieve import neighbour_configs
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
    shortlist: int = 10  # candidates per shape
    neighbours: int = 3  # winners of the nearest tuned shapes put first
    finalists: int = 2
    screen_rounds: int = 3
    final_rounds: int = 10
    noise: float = 0.02  # the margin a kernel must win by (the repeatability seen on the H200)
    autotune_iterations: int = 5  # per cuBLASLt algorithm
    baselines: tuple[str, ...] = BASELINES


def estimate_seconds(shape: Shape, settings: TuneSettings = TuneSettings()) -> float:
    """Device-machine seconds to tune `shape` (before calibration)."""
    baselines = len(settings.baselines)
    calls = (settings.shortlist * (2 + settings.screen_rounds)
             + (settings.finalists + baselines) * (1 + settings.final_rounds)
             + (1 + baselines) * (1 + settings.final_rounds)
             + 16 * settings.autotune_iterations)  # the autotuned plan's algorithms
    return (SHAPE_OVERHEAD_S + calls * (CALL_OVERHEAD_S + shape.flops / SUSTAINED_FLOPS)
            + shape.flops / REFERENCE_FLOPS)


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
               baselines: BaselineSet | None = None) -> TableEntry:
    """One shape, steps 1-6 of the module docstring. `operands` and `baselines` may be shared
    with the benchmark of the same shape (they are made here when not given)."""
    began = clock()
    operands = operands or measurer.operands(shape)
    a, b = operands.a, operands.b
    extra = neighbour_configs(table, shape, settings.neighbours)
    configs = shortlist(shape, sm_count, extra, settings.shortlist)
    out, results = _check_candidates(shape, configs, measurer, operands)
    correct = [config for config in configs if results[config].failure is None]
    screen = _screen(correct, a, b, out, measurer, settings)
    for config in correct:
        results[config] = _with_screen(results[config], screen.get(config))
    finalists = sorted((c for c in correct if screen.get(c) is not None),
                       key=lambda c: screen[c])[: settings.finalists]
    found = baselines or make_baselines(operands, settings.baselines,
                                        settings.autotune_iterations)
    try:
        times, best = _final(finalists, found, out, measurer, settings, operands, results)
    finally:
        if baselines is None:
            found.close()
    use_kernel = best is not None and kernel_wins(times["tuned"],
                                                  times.get("torch", MethodTimes()),
                                                  settings.noise)
    return TableEntry(shape, best, use_kernel, times, tuple(results[c] for c in configs),
                      environment(), clock() - began, tuple(found.notes))


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
    timed = measurer.time(calls, "graph", settings.screen_rounds)
    return {config: median_ms(timed.get(config.label)) for config in correct}


def _with_screen(candidate: ConfigTrial, screen_ms: float | None) -> ConfigTrial:
    failure_text = candidate.failure
    if screen_ms is None and failure_text is None:
        failure_text = "could not be timed in a CUDA graph"
    return ConfigTrial(candidate.config, screen_ms, candidate.error, failure_text)


def _launcher(config: Config, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
    return lambda: kernels.launch(config, a, b, out)


def _final(finalists: list[Config], found: BaselineSet, out: torch.Tensor, measurer: Measurer,
           settings: TuneSettings, operands: Operands,
           results: dict[Config, ConfigTrial]) -> tuple[dict[str, MethodTimes], Config | None]:
    """Step 5: the finalists and the baselines in kernel-only time, then the best finalist and
    the baselines in graph time; the times of each method and the best finalist."""
    errors = _baseline_errors(found, measurer, operands)
    calls = {c.label: _launcher(c, operands.a, operands.b, out) for c in finalists}
    kernel = measurer.time({**calls, **found.calls()}, "kernel", settings.final_rounds)
    timed = [c for c in finalists if median_ms(kernel.get(c.label)) is not None]
    best = min(timed, key=lambda c: median_ms(kernel[c.label])) if timed else None
    graph_calls = {**found.calls(), **({"tuned": calls[best.label]} if best else {})}
    graph = measurer.time(graph_calls, "graph", settings.final_rounds)
    times = {name: _method_times(kernel.get(name), graph.get(name), errors[name])
             for name in found.baselines}
    times["tuned"] = (_method_times(kernel.get(best.label), graph.get("tuned"),
                                    results[best].error)
                      if best else MethodTimes(note="no candidate was correct and timed"))
    return times, best


def _baseline_errors(found: BaselineSet, measurer: Measurer,
                     operands: Operands) -> dict[str, float]:
    errors = {}
    for name, baseline in found.baselines.items():
        baseline.call()
        measurer.synchronize()
        errors[name] = relative_error(baseline.out, operands.reference)
    return errors


def _method_times(kernel, graph, error: float | None) -> MethodTimes:
    return MethodTimes(median_ms(kernel), median_ms(graph), error,
                       failure(kernel) or failure(graph))


def kernel_wins(tuned: MethodTimes, torch_times: MethodTimes, noise: float) -> bool:
    """The dispatcher's rule: faster in kernel-only time by more than the noise, capturable in
    a graph and no slower there beyond the noise."""
    if tuned.kernel_ms is None or torch_times.kernel_ms is None or tuned.graph_ms is None:
        return False
    if tuned.kernel_ms > torch_times.kernel_ms * (1 - noise):
        return False
    return torch_times.graph_ms is None or tuned.graph_ms <= torch_times.graph_ms * (1 + noise)


def summary_line(entry: TableEntry) -> str:
    """One line for a tuned shape: the tuned kernel's speedup and the dispatcher's choice."""
    tuned, base = entry.time("tuned"), entry.time("torch")
    ratio = f"{base / tuned:5.2f}x" if tuned and base else "  n/a"
    choice = entry.best.label if entry.use_kernel and entry.best else "torch.matmul"
    return f"{entry.shape.key:40s} {ratio} vs torch  -> {choice}  ({entry.seconds:.1f} s)"
