"""From a traced reference to speed-of-light times: the roofline bounds of one workload.

T_SOL = max(compute time, fused bytes / DRAM bandwidth), where
- compute time = the largest, over compute units, of that unit's FLOPs / its peak (units run
  concurrently; the busiest one bounds the kernel);
- fused bytes = every graph input read once (only the rows some op actually reads) plus every
  graph output written once: a single fully fused kernel's compulsory traffic.
Reported beside it:
- the unfused bound: the same roofline with the bytes every op would move as its own kernel;
- the per-op roofline sum: sum over ops of max(op compute time, op bytes / bandwidth);
- the cache-aware bound: no kernel moves fewer bytes than max(fused bytes, the capacity bound of
  its largest matrix product), where a product C[M,N] = A[M,K] B[K,N] with S words of on-chip
  storage needs at least 2*M*N*K / sqrt(S) words of traffic (Hong & Kung 1981; the tight constant
  from Smith et al., "A Tight I/O Lower Bound for Matrix Multiplication", 2019; the form Orojenesis
  uses). S is the whole on-chip capacity (L2, shared memory, registers), which keeps it a floor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from solforge.data.workload import Workload
from solforge.errors import AnalysisError
from solforge.hardware.profile import HardwareProfile
from solforge.hardware.units import (
    SIMT_FP32,
    SIMT_FP64,
    TENSOR_BF16,
    TENSOR_FP8,
    TENSOR_FP64,
    TENSOR_TF32,
)
from solforge.problem.problem import Problem
from solforge.solar.costs import TENSOR_FP32, cost_of
from solforge.solar.records import OpCost, Product
from solforge.solar.tracer import OpTrace, trace_reference

FP32_POLICIES = {
    "tf32": "float32 products on the TF32 tensor cores (PyTorch with allow_tf32 / 'high')",
    "simt": "float32 products on the CUDA cores (strict IEEE float32, PyTorch's default)",
    "fastest": "float32 products at the fastest tensor-core rate of the chip (a floor no "
               "kernel can beat, whatever precision it computes in)",
}
DEFAULT_FP32_POLICY = "tf32"

# When a chip lacks a unit, its work runs on the next-best one (fp4 data on an H100 runs as fp8).
_FALLBACK = {
    "tensor.fp4": (TENSOR_FP8, TENSOR_BF16),
    "tensor.int8": (TENSOR_FP8, TENSOR_BF16),
    TENSOR_FP8: (TENSOR_BF16,),
    "tensor.fp16": (TENSOR_BF16,),
    TENSOR_FP64: (SIMT_FP64,),
    TENSOR_TF32: (SIMT_FP32,),
    SIMT_FP64: (SIMT_FP32,),
}


@dataclass(frozen=True)
class OpSummary:
    """All calls of one ATen op in a workload, summed."""

    op: str
    calls: int
    flops: float
    bytes: float
    roofline_ms: float  # sum over the calls of max(compute, bytes / bandwidth)


@dataclass(frozen=True)
class Analysis:
    problem: str
    workload: str
    axes: dict[str, int]
    hardware: str
    hardware_kind: str
    fp32_policy: str
    flops: dict[str, float]  # unit as counted -> FLOPs
    priced_as: dict[str, str]  # unit as counted -> the profile unit whose peak priced it
    tensor_core_flops: float
    bytes_fused: float
    bytes_unfused: float
    bytes_cache_aware: float
    t_compute_ms: float
    t_memory_ms: float
    t_sol_ms: float
    bound: str  # "compute" or "memory"
    binding_unit: str  # the unit, or "dram"
    t_unfused_ms: float
    t_per_op_ms: float
    t_cache_aware_ms: float
    ops: tuple[OpSummary, ...]
    unknown_ops: tuple[str, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict:
        """The `--json` line: the headline fields first, then the rest."""
        data = asdict(self)
        data["ops"] = [asdict(o) for o in self.ops]
        return data


def analyze_workload(problem: Problem, workload: Workload, profile: HardwareProfile,
                     fp32_policy: str = DEFAULT_FP32_POLICY,
                     trace: OpTrace | None = None) -> Analysis:
    if fp32_policy not in FP32_POLICIES:
        raise AnalysisError(f"unknown fp32 policy {fp32_policy!r} "
                            f"(choose from {', '.join(FP32_POLICIES)})")
    trace = trace or trace_reference(problem, workload)
    costs, unknown = _cost_records(trace)
    flops = _sum_flops(costs)
    priced_as = {unit: price_unit(unit, profile, fp32_policy) for unit in flops}
    t_compute_ms, binding_unit = _compute_time_ms(flops, priced_as, profile)
    bandwidth = profile.dram_bytes_per_s
    bytes_fused = float(sum(trace.input_bytes_read.values()) + trace.output_bytes)
    bytes_unfused = float(sum(c.bytes for _, c in costs))
    bytes_cache_aware = max(bytes_fused, _largest_capacity_bound(costs, profile))
    t_memory_ms = _ms(bytes_fused / bandwidth)
    bound = "compute" if t_compute_ms >= t_memory_ms else "memory"
    summaries = _summaries(costs, profile, fp32_policy)
    notes = list(trace.notes)
    if unknown:
        notes.append(f"ops with no cost rule (counted as zero): {', '.join(unknown)}")
    return Analysis(
        problem=problem.name, workload=workload.uuid, axes=problem.axes(workload),
        hardware=profile.name, hardware_kind=profile.kind, fp32_policy=fp32_policy,
        flops=flops, priced_as=priced_as,
        tensor_core_flops=sum(v for u, v in flops.items() if u.startswith("tensor.")),
        bytes_fused=bytes_fused, bytes_unfused=bytes_unfused,
        bytes_cache_aware=bytes_cache_aware,
        t_compute_ms=t_compute_ms, t_memory_ms=t_memory_ms,
        t_sol_ms=max(t_compute_ms, t_memory_ms), bound=bound,
        binding_unit=binding_unit if bound == "compute" else "dram",
        t_unfused_ms=max(t_compute_ms, _ms(bytes_unfused / bandwidth)),
        t_per_op_ms=sum(s.roofline_ms for s in summaries),
        t_cache_aware_ms=max(t_compute_ms, _ms(bytes_cache_aware / bandwidth)),
        ops=tuple(summaries), unknown_ops=tuple(unknown), notes=tuple(notes),
    )


def sol_floor_ms(problem: Problem, workload: Workload, profile: HardwareProfile,
                 trace: OpTrace | None = None) -> float:
    """A time no honest kernel can beat: every peak at the maximum clock, float32 products at
    the fastest tensor-core rate, and the traffic a kernel must finish at the datasheet
    bandwidth. That traffic is every input read once but only the outputs that cannot stay in
    the L2: the L2 is write-back, so a kernel can end with up to its capacity of written lines
    still dirty there, written to DRAM after the kernel's time has ended. (On an H100 an
    honest SwiGLU of 44 MB, a third of it output, took 12.4 us against 13.1 us for all of its
    bytes at 3.35 TB/s, 2026-12-05; its reads alone take 8.8 us.) T_SOL keeps every byte."""
    trace = trace or trace_reference(problem, workload)
    fastest = analyze_workload(problem, workload, profile.at_max_clock(), "fastest", trace)
    # reads + the outputs beyond the L2, at the DRAM bandwidth
    must_move = (float(sum(trace.input_bytes_read.values()))
                 + max(0.0, float(trace.output_bytes) - profile.l2_bytes))
    return max(fastest.t_compute_ms, _ms(must_move / profile.dram_bytes_per_s))


def price_unit(unit: str, profile: HardwareProfile, fp32_policy: str) -> str:
    """The profile unit whose peak prices FLOPs counted on `unit`."""
    if unit == TENSOR_FP32:
        unit = {"tf32": TENSOR_TF32, "simt": SIMT_FP32,
                "fastest": fastest_tensor_unit(profile)}[fp32_policy]
    for candidate in (unit, *_FALLBACK.get(unit, ())):
        if profile.has(candidate):
            return candidate
    raise AnalysisError(f"{profile.name} has no unit to run {unit} work on")


def fastest_tensor_unit(profile: HardwareProfile) -> str:
    tensor_units = [u for u in profile.peaks if u.startswith("tensor.")]
    if not tensor_units:
        return SIMT_FP32
    return max(tensor_units, key=profile.peak)


def _cost_records(trace: OpTrace) -> tuple[list[tuple[str, OpCost]], list[str]]:
    costs: list[tuple[str, OpCost]] = []
    unknown: set[str] = set()
    for record in trace.records:
        cost = cost_of(record)
        if cost is None:
            unknown.add(record.name)
            continue
        costs.append((record.name, cost))
    return costs, sorted(unknown)


def _sum_flops(costs: list[tuple[str, OpCost]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for _, cost in costs:
        for unit, value in cost.flops.items():
            total[unit] = total.get(unit, 0.0) + value
    return total


def _compute_time_ms(flops: dict[str, float], priced_as: dict[str, str],
                     profile: HardwareProfile) -> tuple[float, str]:
    """max over physical units of (FLOPs priced on it) / its peak."""
    per_unit: dict[str, float] = {}
    for unit, value in flops.items():
        target = priced_as[unit]
        per_unit[target] = per_unit.get(target, 0.0) + value
    if not per_unit:
        return 0.0, "none"
    times = {unit: _ms(value / profile.peak(unit)) for unit, value in per_unit.items()}
    binding = max(times, key=times.get)
    return times[binding], binding


def capacity_bound_bytes(product: Product, onchip_bytes: int) -> float:
    """2*M*N*K / sqrt(S) words of traffic for S words on chip, times the word size."""
    words_on_chip = onchip_bytes / product.element_bytes
    words = 2.0 * product.m * product.n * product.k / math.sqrt(words_on_chip)
    return product.multiplicity * words * product.element_bytes


def _largest_capacity_bound(costs: list[tuple[str, OpCost]], profile: HardwareProfile) -> float:
    """The largest single op's bound: per-op bounds do not add up when ops share operands."""
    largest = 0.0
    for _, cost in costs:
        op_bound = sum(capacity_bound_bytes(p, profile.onchip_bytes) for p in cost.products)
        largest = max(largest, op_bound)
    return largest


def _summaries(costs: list[tuple[str, OpCost]], profile: HardwareProfile,
               fp32_policy: str) -> list[OpSummary]:
    grouped: dict[str, list[OpCost]] = {}
    for name, cost in costs:
        grouped.setdefault(name, []).append(cost)
    summaries = []
    for name, group in grouped.items():
        roofline = sum(_op_roofline_ms(c, profile, fp32_policy) for c in group)
        if roofline == 0.0 and all(c.bytes == 0 for c in group):
            continue  # views and allocations
        summaries.append(OpSummary(name, len(group), sum(sum(c.flops.values()) for c in group),
                                   sum(c.bytes for c in group), roofline))
    return sorted(summaries, key=lambda s: -s.roofline_ms)


def _op_roofline_ms(cost: OpCost, profile: HardwareProfile, fp32_policy: str) -> float:
    priced = {u: price_unit(u, profile, fp32_policy) for u in cost.flops}
    compute_ms, _ = _compute_time_ms(cost.flops, priced, profile)
    return max(compute_ms, _ms(cost.bytes / profile.dram_bytes_per_s))


def _ms(seconds: float) -> float:
    return seconds * 1e3
