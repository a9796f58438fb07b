"""The side-by-side benchmark: solforge.hgemm.matmul (the dispatcher over the tuned table) against
torch.matmul, cuBLASLt's heuristic and autotuned cuBLASLt, per shape, in one run.

For every shape: fresh standard-normal operands; each method's error against the float32
product; then all four methods interleaved in the same timing runs, in
- offline mode: calls back to back (each still on a cold L2), and
- server mode: calls spaced by exponential gaps (Poisson arrivals, mean `server_gap_ms`), the
  GPU idle in between as behind a server (CUDA-L2's second mode);
each timed kernel-only (profiler kernel records: no host launch cost), by CUDA-graph replay,
and, in server mode where eager calls run a tuned kernel, end to end ("events": one call
between two host synchronizes, its host launch cost included, as CUDA-L2 timed). The last is
where a Triton launch, tens of microseconds more host work than torch.matmul's, can lose what
its kernel won: eager calls that lose there go back to torch.matmul (`demotions`).

"Slower beyond noise" compares the dispatcher with each library shape by shape: a ratio under
1 - max(noise, band), where band is twice the standard error of the difference of the two
medians, from the spread each showed in that very run (BenchRow.noise), so a timing that
scatters (server mode's idle GPU, a graph's first replay) is not read as a loss; the count
under plain 1 - noise is kept beside it. Where the dispatcher ran torch.matmul itself (no tuned
kernel for that shape and mode), both columns time the same kernel: their ratios measure the
benchmark's own resolution (`identical_kernel_scatter`), and a "loss" there is noise by
construction, so the losses are also counted over the shapes that ran a tuned kernel alone.

Rows are appended to a JSON-lines file as each shape finishes (resumable, like the tuner).
`summarize` turns rows and the tuned table into the goal numbers: the dispatcher's geometric
mean speedup over torch.matmul and its worst shape, per mode and timing; the share of shapes
where the tuned kernel alone beats autotuned cuBLASLt; the large-cube ratios.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from solforge.hgemm import dispatch
from solforge.hgemm.baselines import BASELINES, BaselineSet, baseline_checks, make_baselines
from solforge.hgemm.budget import (
    CALL_OVERHEAD_S,
    SHAPE_OVERHEAD_S,
    SUSTAINED_FLOPS,
    BudgetReport,
    run_budgeted,
)
from solforge.hgemm.measure import (
    ORDER,
    Measurer,
    Operands,
    failure,
    median_ms,
    relative_error,
)
from solforge.hgemm.roofline import Roof, bytes_moved, roof_for
from solforge.hgemm.space import GRID_SIZES, Config, Shape, set_of, tolerance
from solforge.hgemm.table import Table, TableEntry, append_jsonl, environment, read_jsonl
from solforge.measure.timing import Timing

METHODS = ("dispatch", *BASELINES)
MODES = ("offline", "server")
TIMINGS = ("kernel", "graph", "events")
# End to end is timed where it can decide something: server mode (offline it would differ only
# by the gaps), at shapes whose eager calls run a tuned kernel (elsewhere both columns are the
# same torch.matmul call).
EVENTS_MODE = "server"
GOAL_GEOMEAN = 1.10
LARGE_CUBES = tuple(size for size in GRID_SIZES if size >= 8192)
_GRAPH_NOTE = "in CUDA graphs: "  # the row's note naming the dispatcher's choice under capture


@dataclass(frozen=True)
class BenchSettings:
    rounds: int = 10
    modes: tuple[str, ...] = MODES
    server_gap_ms: float = 1.0
    autotune_iterations: int = 5
    noise: float = 0.02
    small_rounds: int = 32  # rounds for shapes under small_flops (see rounds_for)
    small_flops: float = 2.0**33  # about 11 us of bf16 tensor-core work at the H200's peak


def rounds_for(shape: Shape, settings: BenchSettings) -> int:
    """Timed calls behind each median at `shape`. A microsecond kernel's median scatters most
    (on the 2026-12-01 H200 run two timings of the same torch.matmul differed by 2.0% at the
    median and 8.1% at p95 of shapes with 8 rounds) while its calls cost almost nothing, so small
    shapes get `small_rounds`: the noise bound shrinks as 1/sqrt(rounds)."""
    if shape.flops < settings.small_flops:
        return max(settings.rounds, settings.small_rounds)
    return settings.rounds


@dataclass(frozen=True)
class BenchRow:
    shape: Shape
    choice: str  # the dispatcher's kernel at this shape, or "torch.matmul"
    errors: dict[str, float | None]  # by method
    times: dict[str, dict[str, dict[str, float | None]]]  # mode -> timing -> method -> ms
    notes: tuple[str, ...] = ()
    environment: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    spreads: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # as times
    rounds: int = 0  # timed calls behind each median
    order: str = "fixed"  # how the methods were interleaved: ORDER, or an earlier order

    def time(self, method: str, mode: str = "offline", timing: str = "kernel") -> float | None:
        return self.times.get(mode, {}).get(timing, {}).get(method)

    @property
    def graph_choice(self) -> str | None:
        """The dispatcher's kernel under CUDA-graph capture (None: a row that did not say)."""
        noted = next((n for n in self.notes if n.startswith(_GRAPH_NOTE)), None)
        return None if noted is None else noted.removeprefix(_GRAPH_NOTE)

    def benched_under(self, labels: tuple[str, str] | None) -> bool:
        """Whether the row timed the dispatcher making these (eager, graph) choices; None
        (nothing to compare with) counts as yes."""
        if labels is None:
            return True
        return self.choice == labels[0] and self.graph_choice in (None, labels[1])

    def noise(self, method: str, mode: str, timing: str, floor: float) -> float:
        """The relative difference between `method` and "dispatch" that their own measured
        scatter can explain: twice the standard error of the difference of two medians (for
        near-normal times the median's standard error is 1.2533 sigma / sqrt(n), and
        (p90 - p10) / median is 2.563 sigma / median), never below `floor`."""
        spread = self.spreads.get(mode, {}).get(timing, {})
        if self.rounds < 1 or method not in spread or "dispatch" not in spread:
            return floor
        sigma = math.hypot(spread[method], spread["dispatch"]) / 2.563
        return max(floor, 2 * 1.2533 * sigma / math.sqrt(self.rounds))

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape.to_json(), "key": self.shape.key, "choice": self.choice,
                "errors": self.errors, "times": self.times, "notes": list(self.notes),
                "environment": self.environment, "seconds": self.seconds,
                "spreads": self.spreads, "rounds": self.rounds, "order": self.order}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> BenchRow:
        return cls(Shape.from_json(record["shape"]), record["choice"], record["errors"],
                   record["times"], tuple(record.get("notes", ())),
                   record.get("environment", {}), float(record.get("seconds", 0.0)),
                   record.get("spreads", {}), int(record.get("rounds", 0)),
                   str(record.get("order", "fixed")))


def estimate_seconds(shape: Shape, settings: BenchSettings = BenchSettings()) -> float:
    """Device-machine seconds to benchmark one shape (budget.py's working figures)."""
    rounds = rounds_for(shape, settings)
    timed = sum(len(timings_of(mode, True)) for mode in settings.modes)  # at most
    calls = len(METHODS) * (1 + timed * (1 + rounds))
    calls += 16 * settings.autotune_iterations
    gaps = ("server" in settings.modes) * len(timings_of("server", True)) * len(METHODS) \
        * (rounds + 1)
    return (SHAPE_OVERHEAD_S + calls * (CALL_OVERHEAD_S + shape.flops / SUSTAINED_FLOPS)
            + gaps * settings.server_gap_ms / 1e3)


def timings_of(mode: str, eager_tuned: bool) -> tuple[str, ...]:
    """The timings a shape gets in `mode` (EVENTS_MODE: where end to end is timed)."""
    if mode == EVENTS_MODE and eager_tuned:
        return TIMINGS
    return tuple(timing for timing in TIMINGS if timing != "events")


def bench_shape(shape: Shape, measurer: Measurer, settings: BenchSettings = BenchSettings(),
                clock: Callable[[], float] = time.monotonic, operands: Operands | None = None,
                baselines: BaselineSet | None = None) -> BenchRow:
    """One shape: errors, then offline and server timings of every method. The dispatcher is
    the active one (dispatch.use_table) and, like every baseline, writes into an output made
    before the timing, so no method's time includes an allocation the others do not make.
    `operands` and `baselines` may be shared with the tuning of the same shape."""
    began = clock()
    settings = replace(settings, rounds=rounds_for(shape, settings))
    operands = operands or measurer.operands(shape)
    a, b = operands.a, operands.b
    active = dispatch.active()
    eager = active.choose(a, b, shape.accumulate, dispatch.EAGER)
    graph = active.choose(a, b, shape.accumulate, dispatch.GRAPH)
    found = baselines or make_baselines(operands, BASELINES, settings.autotune_iterations)
    out = torch.empty((shape.m, shape.n), dtype=a.dtype, device=a.device)
    try:
        def dispatched() -> object:
            return dispatch.matmul(a, b, shape.accumulate, out=out)

        errors, working, notes = baseline_checks(found, measurer, operands)
        errors["dispatch"] = relative_error(dispatched(), operands.reference)
        times, spreads, timing_notes = _timed({"dispatch": dispatched, **working}, measurer,
                                              settings, eager is not None)
    finally:
        if baselines is None:
            found.close()
    label = eager.label if eager else "torch.matmul"
    notes.append(f"{_GRAPH_NOTE}{graph.label if graph else 'torch.matmul'}")
    return BenchRow(shape, label, errors, times, tuple(found.notes + notes + timing_notes),
                    environment(), clock() - began, spreads, settings.rounds, ORDER)


def _timed(calls, measurer: Measurer, settings: BenchSettings,
           eager_tuned: bool) -> tuple[dict, dict, list[str]]:
    """Medians and spreads by mode, timing and method, and notes of what failed."""
    times: dict[str, dict[str, dict[str, float | None]]] = {}
    spreads: dict[str, dict[str, dict[str, float]]] = {}
    notes = []
    for mode in settings.modes:
        gap = settings.server_gap_ms / 1e3 if mode == "server" else None
        times[mode], spreads[mode] = {}, {}
        for timing in timings_of(mode, eager_tuned):
            results = measurer.time(calls, timing, settings.rounds, gap)
            times[mode][timing] = {name: median_ms(result) for name, result in results.items()}
            spreads[mode][timing] = {name: result.spread for name, result in results.items()
                                     if isinstance(result, Timing)}
            notes += [f"{name} {mode} {timing}: {failure(result)}"
                      for name, result in results.items() if failure(result)]
    return times, spreads, notes


def bench(shapes: Sequence[Shape], rows_path: Path, measurer: Measurer,
          settings: BenchSettings = BenchSettings(),
          budget_s: float = float("inf"), clock: Callable[[], float] = time.monotonic,
          log: Callable[[str], None] | None = None) -> BudgetReport:
    """Benchmark every shape not yet in the rows file, until the budget runs out, with the
    active dispatcher. A row timed with fewer rounds than `settings` ask for its shape, or in
    an earlier order of the methods than ORDER (measure.py), is measured again (the new row
    replaces it: load_rows keeps a shape's last row)."""
    rows_path = Path(rows_path)
    done = {row.shape.key for row in finished_rows(load_rows(rows_path), measurer.device)
            if row.rounds >= rounds_for(row.shape, settings)}

    def bench_one(shape: Shape) -> None:
        row = bench_shape(shape, measurer, settings, clock)
        append_jsonl(rows_path, row.to_json())
        if log:
            speedup = _ratio(row.time("torch"), row.time("dispatch"))
            log(f"{shape.key:40s} dispatch {speedup:5.2f}x vs torch ({row.choice})")

    pending = [shape for shape in shapes if shape.key not in done]
    return run_budgeted(pending, bench_one, lambda shape: estimate_seconds(shape, settings),
                        budget_s, clock)


def route_labels(eager: Config | None, graph: Config | None) -> tuple[str, str]:
    """(eager, graph) kernel labels as a row names them: "torch.matmul" for None."""
    return (eager.label if eager else "torch.matmul", graph.label if graph else "torch.matmul")


def table_labels(table: Table, shape: Shape) -> tuple[str, str] | None:
    """What the table sends eager calls and graph captures of `shape` to (None: not in it)."""
    entry = table.get(shape)
    if entry is None:
        return None
    return route_labels(entry.best if entry.use_kernel else None,
                        entry.best if entry.use_in_graph else None)


def current_rows(rows: Sequence[BenchRow], device: torch.device) -> list[BenchRow]:
    """The rows that timed what the active dispatcher does now on `device`. A shape tuned again
    after its row was written (another call changed its choice) must be benchmarked again:
    the old row timed torch.matmul, or another kernel, under the dispatcher's name."""
    active = dispatch.active()
    kept = []
    for row in rows:
        labels = None
        if device.type != "cuda":  # the dispatcher sends CPU tensors to torch.matmul
            labels = route_labels(None, None)
        elif active.table.get(row.shape) is not None:
            labels = route_labels(*(active.choose_shape(row.shape, device) or dispatch.TORCH))
        if row.benched_under(labels):
            kept.append(row)
    return kept


def finished_rows(rows: Sequence[BenchRow], device: torch.device) -> list[BenchRow]:
    """The rows no benchmark needs to time again: current (`current_rows`) and timed with the
    methods in the current ORDER (rows of an earlier order are timed again)."""
    return [row for row in current_rows(rows, device) if row.order == ORDER]


def stale_rows(rows: Sequence[BenchRow], table: Table) -> list[str]:
    """Shapes whose row timed other choices than the table makes now."""
    return [row.shape.key for row in rows if not row.benched_under(table_labels(table, row.shape))]


def demotions(rows: Sequence[BenchRow], table: Table, noise: float = 0.02
              ) -> list[TableEntry]:
    """Table entries to append where the benchmark found the tuned kernel slower than
    torch.matmul beyond noise (the summary's own test: `tuned_shapes_slower_beyond_noise`) in a
    timing it is used for, offline or server: that timing goes to torch.matmul ("never
    slower"; kernel-only and end-to-end (events) decide eager calls, `use_kernel`, graph
    decides captures, `use_in_graph`). Only rows that timed the table's present choices
    count; the row of a demoted shape is stale from then on, and the next benchmark times it
    again."""
    found = []
    for row in rows:
        entry = table.get(row.shape)
        if entry is None or not row.benched_under(table_labels(table, row.shape)):
            continue
        lost = {timing: [f"{mode} {ratio:.3f}x" for mode in row.times
                         if (ratio := tuned_loss(row, mode, timing, noise)) is not None]
                for timing in TIMINGS}
        lost = {timing: losses for timing, losses in lost.items() if losses}
        if not lost:
            continue
        note = "; ".join(f"{timing}: torch.matmul, the tuned kernel {', '.join(losses)} of "
                         "its speed in the benchmark" for timing, losses in lost.items())
        eager_lost = "kernel" in lost or "events" in lost
        found.append(replace(entry, use_kernel=entry.use_kernel and not eager_lost,
                             use_in_graph=entry.use_in_graph and "graph" not in lost,
                             notes=(*entry.notes, f"demoted after benchmarking ({note})")))
    return found


def tuned_loss(row: BenchRow, mode: str, timing: str, noise: float) -> float | None:
    """torch.matmul's time over the dispatcher's where the dispatcher ran a tuned kernel and
    lost beyond noise (the row's own scatter, at least `noise`); None otherwise."""
    if _identical(row, timing):
        return None
    ratio = _ratio(row.time("torch", mode, timing), row.time("dispatch", mode, timing))
    return ratio if ratio < 1 - row.noise("torch", mode, timing, noise) else None


def load_rows(path: Path) -> list[BenchRow]:
    rows = {}
    for record in read_jsonl(Path(path))[0]:
        row = BenchRow.from_json(record)
        rows[row.shape.key] = row
    return list(rows.values())


# -- the numbers -------------------------------------------------------------------------------

def _ratio(baseline: float | None, candidate: float | None) -> float:
    """baseline / candidate: above 1 when the candidate is faster; NaN when either is missing."""
    if not baseline or not candidate:
        return math.nan
    return baseline / candidate


@dataclass(frozen=True)
class Speedups:
    shapes: int
    geomean: float | None
    minimum: float | None
    worst: str | None  # the shape of the minimum
    below_one: int
    below_noise: int  # slower beyond noise: under 1 - max(noise, the pair's measured scatter)
    below_fixed_noise: int = 0  # under 1 - noise, whatever the scatter

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def speedups(pairs: Iterable[tuple], noise: float) -> Speedups:
    """Summary of (shape key, speedup) or (shape key, speedup, noise band) triples, NaN
    speedups left out; a pair without a band has `noise`."""
    kept = [(pair[0], pair[1], pair[2] if len(pair) > 2 else noise) for pair in pairs
            if not math.isnan(pair[1])]
    if not kept:
        return Speedups(0, None, None, None, 0, 0, 0)
    ratios = [ratio for _, ratio, _ in kept]
    worst_key, worst, _ = min(kept, key=lambda pair: pair[1])
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return Speedups(len(kept), geomean, worst, worst_key, sum(r < 1 for r in ratios),
                    sum(ratio < 1 - band for _, ratio, band in kept),
                    sum(r < 1 - noise for r in ratios))


def summarize(rows: Sequence[BenchRow], table: Table, noise: float = 0.02,
              roof: Roof | None = None) -> dict[str, Any]:
    """The issue's numbers from benchmark rows and the tuned table (module docstring)."""
    modes = sorted({mode for row in rows for mode in row.times})
    against = {}
    for baseline in BASELINES:
        against[baseline] = {
            mode: {timing: speedups(((row.shape.key, _ratio(row.time(baseline, mode, timing),
                                                            row.time("dispatch", mode, timing)),
                                      row.noise(baseline, mode, timing, noise))
                                     for row in rows), noise).to_json()
                   for timing in TIMINGS}
            for mode in modes}
    by_set = {timing: {name: speedups(((row.shape.key, _ratio(row.time("torch", "offline", timing),
                                                            row.time("dispatch", "offline",
                                                                     timing)),
                                        row.noise("torch", "offline", timing, noise))
                                       for row in rows if set_of(row.shape) == name),
                                      noise).to_json()
                       for name in ("grid", "decode", "prefill", "other")}
              for timing in ("kernel", "graph")}  # offline: no end-to-end timing there
    offline = against["torch"].get("offline", {})
    slower = {mode: {timing: against["torch"][mode][timing]["below_noise"] for timing in TIMINGS}
              for mode in modes}
    slower_fixed = {mode: {timing: against["torch"][mode][timing]["below_fixed_noise"]
                           for timing in TIMINGS} for mode in modes}
    tuned = {mode: {timing: sum(tuned_loss(row, mode, timing, noise) is not None
                                for row in rows)
                    for timing in TIMINGS} for mode in modes}
    versus_lt = _tuned_vs_autotuned(table, noise)
    decode = _decode_bandwidth(rows, table, roof or roof_for(
        rows[0].environment.get("gpu") if rows else None))
    stale = stale_rows(rows, table)
    return {
        "shapes": len(rows),
        # rows timed under choices since changed (tuned again, demoted): not the shipped times
        "stale_rows": {"count": len(stale), "shapes": stale[:100]},
        # rows timed with the methods in an earlier order: the next benchmark times them again
        "earlier_order_rows": sum(row.order != ORDER for row in rows),
        "dispatch_speedup": against,
        "dispatch_vs_torch_by_set": by_set["kernel"],
        "dispatch_vs_torch_by_set_graph": by_set["graph"],
        "tuned_vs_cublaslt_autotuned": versus_lt,
        "large_cubes": _large_cubes(rows, table),
        "decode_hbm_fraction": decode,
        "errors_over_tolerance": _errors_over_tolerance(rows),
        "identical_kernel_scatter": {mode: {timing: _scatter(rows, mode, timing)
                                            for timing in TIMINGS} for mode in modes},
        "goal": {
            "geomean_target": GOAL_GEOMEAN,
            "grid_shapes": by_set["kernel"]["grid"]["shapes"],
            "grid_geomean_offline_kernel": by_set["kernel"]["grid"]["geomean"],
            "grid_geomean_offline_graph": by_set["graph"]["grid"]["geomean"],
            "geomean_offline_kernel": offline.get("kernel", {}).get("geomean"),
            "geomean_offline_graph": offline.get("graph", {}).get("geomean"),
            "geomean_met": (by_set["kernel"]["grid"]["geomean"] or 0) >= GOAL_GEOMEAN,
            "graph_geomean_at_least_one": (by_set["graph"]["grid"]["geomean"] or 0) >= 1.0,
            "worst_offline_kernel": offline.get("kernel", {}).get("minimum"),
            "slower_beyond_noise": slower,
            "slower_than_fixed_noise": slower_fixed,  # 1 - noise, the scatter left aside
            "noise": noise,
            "no_shape_slower_beyond_noise": all(count == 0 for timings in slower.values()
                                                for count in timings.values()),
            "tuned_shapes_slower_beyond_noise": tuned,  # shapes that ran a tuned kernel
            "tuned_at_least_as_fast_as_cublaslt_autotuned": versus_lt["kernel"][
                "fraction_at_least_as_fast"],
            "decode_large_weight_shapes": len(decode),
            "decode_large_weight_at_90_percent_hbm": sum((d["dispatch"] or 0) >= 0.9
                                                         for d in decode),
        },
        "environment": _environment(rows),
    }


def _tuned_vs_autotuned(table: Table, noise: float) -> dict[str, Any]:
    """Share of shapes where the tuned kernel alone beats autotuned cuBLASLt ("tuned_faster"),
    and where it is at least as fast within the noise ("at_least_as_fast")."""
    result = {}
    for timing in ("kernel", "graph"):  # the tuner times the libraries offline in these two
        pairs = [(entry.time("cublaslt_autotuned", timing), entry.time("tuned", timing))
                 for entry in table]
        compared = [(lt, tuned) for lt, tuned in pairs if lt and tuned]
        wins = sum(tuned < lt for lt, tuned in compared)
        level = sum(tuned <= lt * (1 + noise) for lt, tuned in compared)
        total = len(compared)
        result[timing] = {"shapes": total, "tuned_faster": wins,
                          "fraction": wins / total if total else None,
                          "at_least_as_fast": level,
                          "fraction_at_least_as_fast": level / total if total else None}
    return result


LARGE_DECODE_WEIGHT = 2**24  # N * K elements: a 32 MB weight and up, where HBM sets the pace


def _decode_bandwidth(rows: Sequence[BenchRow], table: Table, roof: Roof
                      ) -> list[dict[str, Any]]:
    """The share of the DRAM bandwidth of the roof (bytes_moved / time) that the dispatcher,
    torch.matmul and the tuned kernel reach on the decode shapes with a large weight, offline
    and kernel-only: the GEMV path's goal is 90% on these."""
    found = []
    for row in sorted(rows, key=lambda r: r.shape.key):
        shape = row.shape
        if set_of(shape) != "decode" or shape.n * shape.k < LARGE_DECODE_WEIGHT:
            continue
        entry = table.get(shape)
        found.append({"shape": shape.key,
                      "dispatch": _hbm_share(shape, row.time("dispatch"), roof),
                      "torch": _hbm_share(shape, row.time("torch"), roof),
                      "tuned": _hbm_share(shape, entry.time("tuned"), roof) if entry else None,
                      "tuned_kernel": entry.best.label if entry and entry.best else None})
    return found


def _hbm_share(shape: Shape, ms: float | None, roof: Roof) -> float | None:
    return None if not ms else bytes_moved(shape) / (ms / 1e3) / roof.dram_bytes_per_s


def _large_cubes(rows: Sequence[BenchRow], table: Table) -> list[dict[str, Any]]:
    by_key = {row.shape.key: row for row in rows}
    cubes = []
    for size in LARGE_CUBES:
        shape = Shape(size, size, size)
        entry, row = table.get(shape), by_key.get(shape.key)
        cubes.append({
            "shape": f"{size}^3",
            "tuned_vs_torch": _ratio(entry.time("torch"), entry.time("tuned")) if entry else None,
            "tuned_vs_cublaslt_autotuned": (_ratio(entry.time("cublaslt_autotuned"),
                                                   entry.time("tuned")) if entry else None),
            "dispatch_vs_torch": _ratio(row.time("torch"), row.time("dispatch")) if row else None,
            "tuned_kernel": entry.best.label if entry and entry.best else None,
        })
    return cubes


def _identical(row: BenchRow, timing: str) -> bool:
    """Did the dispatcher run torch.matmul itself in this timing (kernel and events: its eager
    choice; graph: its choice under capture, noted in the row)?"""
    if timing == "graph" and row.graph_choice is not None:
        return row.graph_choice == "torch.matmul"
    return row.choice == "torch.matmul"


def _scatter(rows: Sequence[BenchRow], mode: str, timing: str) -> dict[str, Any]:
    """How far apart two timings of the same kernel come out: |1 - torch / dispatch| over the
    shapes where the dispatcher ran torch.matmul (median and 95th percentile)."""
    gaps = sorted(abs(1 - ratio) for row in rows if _identical(row, timing)
                  for ratio in [_ratio(row.time("torch", mode, timing),
                                       row.time("dispatch", mode, timing))]
                  if not math.isnan(ratio))
    if not gaps:
        return {"shapes": 0, "median": None, "p95": None}
    return {"shapes": len(gaps), "median": gaps[len(gaps) // 2],
            "p95": gaps[min(len(gaps) - 1, math.ceil(0.95 * len(gaps)) - 1)]}


def _errors_over_tolerance(rows: Sequence[BenchRow]) -> list[dict[str, Any]]:
    return [{"shape": row.shape.key, "method": method, "error": error}
            for row in rows for method, error in row.errors.items()
            if error is None or not error <= tolerance(row.shape)]


def _scatter_line(scatter: dict[str, Any]) -> str:
    return "; ".join(f"{mode} {timing} {_number(found['median'])} / {_number(found['p95'])} "
                     f"({found['shapes']} shapes)"
                     for mode, timings in scatter.items() for timing, found in timings.items())


def markdown(summary: dict[str, Any], rows: Sequence[BenchRow]) -> str:
    """The summary as a Markdown report (headline numbers, per set, large cubes, decode)."""
    goal = summary["goal"]
    lines = ["# HGEMM: dispatcher vs cuBLAS on " + str(summary["environment"].get("gpu", "?")),
             "", _environment_line(summary["environment"]), "", "## Goals", "",
             f"- grid shapes benchmarked: {goal['grid_shapes']} (goal: 1,000)",
             f"- grid geomean vs torch.matmul, kernel-only: "
             f"{_number(goal['grid_geomean_offline_kernel'])} (goal: {GOAL_GEOMEAN}); "
             f"CUDA graph: {_number(goal['grid_geomean_offline_graph'])} (goal: 1.0)",
             f"- shapes slower than torch.matmul beyond noise, per mode and timing: "
             f"{goal['slower_beyond_noise']} (goal: none); by more than {goal['noise']:.0%} "
             f"whatever the scatter: {goal['slower_than_fixed_noise']}; of the shapes that "
             f"ran a tuned kernel: {goal.get('tuned_shapes_slower_beyond_noise')}",
             f"- the benchmark's resolution, two timings of the same kernel (torch.matmul in "
             f"both columns), |1 - ratio| median / 95th percentile: "
             f"{_scatter_line(summary.get('identical_kernel_scatter', {}))}",
             f"- tuned kernel at least as fast as autotuned cuBLASLt: "
             f"{_number(goal['tuned_at_least_as_fast_as_cublaslt_autotuned'])} of the shapes "
             f"compared (goal: 0.5)",
             f"- decode shapes with a large weight at 90% of HBM bandwidth: "
             f"{goal['decode_large_weight_at_90_percent_hbm']} of "
             f"{goal['decode_large_weight_shapes']}",
             f"- rows timed under choices the table has changed since (tuned again or "
             f"demoted; not the shipped dispatcher; the next pass benchmarks them again): "
             f"{summary['stale_rows']['count']} of "
             f"{summary['shapes']}", "",
             "## Dispatcher speedup (geometric mean, worst shape, shapes slower beyond noise)",
             "", "| baseline | mode | timing | shapes | geomean | worst | worst shape | "
             "slower beyond noise |", "|---|---|---|---|---|---|---|---|"]
    for baseline, modes in summary["dispatch_speedup"].items():
        for mode, timings in modes.items():
            for timing, s in timings.items():
                lines.append(f"| {baseline} | {mode} | {timing} | {s['shapes']} | "
                             f"{_number(s['geomean'])} | {_number(s['minimum'])} | "
                             f"{s['worst']} | {s['below_noise']} |")
    lines += ["", "## Per shape set (vs torch.matmul, offline)", "",
              "| set | timing | shapes | geomean | worst | slower beyond noise |",
              "|---|---|---|---|---|---|"]
    for timing, key in (("kernel", "dispatch_vs_torch_by_set"),
                        ("graph", "dispatch_vs_torch_by_set_graph")):
        for name, s in summary[key].items():
            if s["shapes"]:
                lines.append(f"| {name} | {timing} | {s['shapes']} | {_number(s['geomean'])} | "
                             f"{_number(s['minimum'])} | {s['below_noise']} |")
    lines += ["", "## Tuned kernel alone vs autotuned cuBLASLt", "",
              "| timing | shapes | tuned faster | fraction | at least as fast (noise) | fraction |",
              "|---|---|---|---|---|---|"]
    for timing, s in summary["tuned_vs_cublaslt_autotuned"].items():
        lines.append(f"| {timing} | {s['shapes']} | {s['tuned_faster']} | "
                     f"{_number(s['fraction'])} | {s['at_least_as_fast']} | "
                     f"{_number(s['fraction_at_least_as_fast'])} |")
    lines += ["", "## Large cubes", "", "| shape | tuned / torch | tuned / cuBLASLt autotuned | "
              "dispatch / torch | tuned kernel |", "|---|---|---|---|---|"]
    for cube in summary["large_cubes"]:
        lines.append(f"| {cube['shape']} | {_number(cube['tuned_vs_torch'])} | "
                     f"{_number(cube['tuned_vs_cublaslt_autotuned'])} | "
                     f"{_number(cube['dispatch_vs_torch'])} | {cube['tuned_kernel']} |")
    lines += ["", "## Decode shapes (offline; microseconds, kernel-only / graph)", "",
              "| shape | dispatch | torch | cuBLASLt heuristic | cuBLASLt autotuned | choice |",
              "|---|---|---|---|---|---|"]
    for row in sorted((r for r in rows if set_of(r.shape) == "decode"), key=lambda r: r.shape.key):
        cells = [f"{_us(row.time(m))} / {_us(row.time(m, timing='graph'))}" for m in METHODS]
        lines.append(f"| {row.shape.key} | {' | '.join(cells)} | {row.choice} |")
    lines += ["", "## Decode shapes with a large weight: share of HBM bandwidth (kernel-only)",
              "", "| shape | dispatch | torch | tuned | tuned kernel |", "|---|---|---|---|---|"]
    for item in summary["decode_hbm_fraction"]:
        lines.append(f"| {item['shape']} | {_number(item['dispatch'])} | "
                     f"{_number(item['torch'])} | {_number(item['tuned'])} | "
                     f"{item['tuned_kernel']} |")
    errors = summary["errors_over_tolerance"]
    lines += ["", f"Errors over the tolerance: {len(errors)}"]
    lines += [f"- {e['shape']} {e['method']}: {e['error']}" for e in errors[:20]]
    return "\n".join(lines) + "\n"


def _environment(rows: Sequence[BenchRow]) -> dict[str, Any]:
    """The first row's environment, with the first and the last date of all rows: a store
    grown over several calls spans their days."""
    if not rows:
        return {}
    dates = sorted(str(row.environment["date"]) for row in rows if row.environment.get("date"))
    return {**rows[0].environment, **({"date": dates[0], "last_date": dates[-1]} if dates else {})}


def _environment_line(env: dict[str, Any]) -> str:
    keys = ("date", "last_date", "gpu", "sm_count", "torch", "triton", "cuda", "nvmath")
    return ", ".join(f"{key} {env.get(key)}" for key in keys)


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.3f}"


def _us(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms * 1e3:.1f}"
