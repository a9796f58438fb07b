"""Measure this GPU's two ceilings, memory bandwidth and matrix rate per dtype, into a profile.

Datasheet peaks are leads: a copy reaches ~89% of the H200's 4.8 TB/s and cuBLAS bf16 ~70-75% of
its 989 TFLOP/s. A "measured" profile holds what this machine does reach, through torch (cuBLAS),
timed like every candidate (kernel records, cold L2, median of many iterations), on random data
(zeros can run faster than real data). Units not measured keep the datasheet figure of the
detected GPU.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from solforge.errors import HardwareError
from solforge.hardware.catalog import datasheet_for_device
from solforge.hardware.profile import HardwareProfile
from solforge.hardware.units import (
    SIMT_FP32,
    TENSOR_BF16,
    TENSOR_FP8,
    TENSOR_FP16,
    TENSOR_FP64,
    TENSOR_INT8,
    TENSOR_TF32,
)
from solforge.measure.clocks import clock_reader, cuda_index
from solforge.measure.timing import Timing, time_iterations

GIB = 1024**3


@dataclass(frozen=True)
class Measurement:
    """One ceiling: `amount` FLOPs (OPs for int8) or bytes per iteration, and how long it took."""

    name: str
    unit: str | None  # the compute unit, or None for a memory bandwidth
    amount: float
    timing: Timing

    @property
    def rate(self) -> float:
        """FLOP/s (or bytes/s) at the median time."""
        return self.amount / (self.timing.median_ms * 1e-3)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "amount": self.amount, "rate": self.rate,
                "method": self.timing.method, "median_ms": self.timing.median_ms,
                "spread": self.timing.spread, "sm_clock_mhz": self.timing.sm_clock_mhz,
                "mem_clock_mhz": self.timing.mem_clock_mhz}


@dataclass(frozen=True)
class Calibration:
    profile: HardwareProfile  # kind "measured"
    datasheet: HardwareProfile | None  # the catalog entry of this GPU, when it has one
    measurements: tuple[Measurement, ...]
    skipped: tuple[tuple[str, str], ...]  # (measurement, why) for what this GPU or torch lacks


@dataclass(frozen=True)
class _MatmulCase:
    name: str
    unit: str
    make: Callable[[int, torch.device], Callable[[], Any]]  # (n, device) -> one product
    float32_precision: str = "highest"  # torch's switch between fp32 and TF32 matmuls


def calibrate(device: str = "cuda", iterations: int = 50, warmup: int = 5,
              bandwidth_bytes: int = 4 * GIB, matmul_n: int = 8192) -> Calibration:
    """Measure copy and reduction bandwidth and the matmul rate of each dtype torch offers."""
    if not torch.cuda.is_available():
        raise HardwareError("calibrate needs a CUDA GPU, and torch sees none "
                            "(torch.cuda.is_available() is False)")
    try:
        named = torch.device(device)
    except RuntimeError:
        raise HardwareError(f"not a device: {device!r}") from None
    if named.type != "cuda":
        raise HardwareError(f"calibrate measures a CUDA device, not {device!r}")
    cuda = torch.device("cuda", cuda_index(named))
    torch.cuda.set_device(cuda)
    sheet = datasheet_for_device(torch.cuda.get_device_name(cuda))
    datasheet = sheet.profile() if sheet is not None else None
    measurements = list(_bandwidths(cuda, bandwidth_bytes, iterations, warmup))
    skipped = []
    for case in _MATMULS:
        try:
            measurements.append(_time_matmul(case, matmul_n, cuda, iterations, warmup))
        except (RuntimeError, NotImplementedError, AttributeError) as exc:
            skipped.append((case.name, _first_line(exc)))
    profile = _measured_profile(datasheet, cuda, measurements, iterations)
    return Calibration(profile, datasheet, tuple(measurements), tuple(skipped))


def _bandwidths(device: torch.device, nbytes: int, iterations: int,
                warmup: int) -> Iterator[Measurement]:
    generator = torch.Generator(device=device).manual_seed(0)
    source = torch.randn(nbytes // 4, device=device, generator=generator)
    yield _copy_bandwidth(source, iterations, warmup)
    # Reduction: every byte read once; the 4-byte result is negligible.
    reduction = time_iterations(lambda i: source.sum(), iterations, warmup)
    yield Measurement(f"sum {nbytes / GIB:g} GiB", None, float(nbytes), reduction)


def _copy_bandwidth(source: torch.Tensor, iterations: int, warmup: int) -> Measurement:
    target = torch.empty_like(source)
    nbytes = source.numel() * source.element_size()
    timing = time_iterations(lambda i: target.copy_(source), iterations, warmup)
    # Copy: every byte read once and written once.
    return Measurement(f"copy {nbytes / GIB:g} GiB", None, 2.0 * nbytes, timing)


def _time_matmul(case: _MatmulCase, n: int, device: torch.device, iterations: int,
                 warmup: int) -> Measurement:
    with _float32_matmul_precision(case.float32_precision):
        product = case.make(n, device)
        timing = time_iterations(lambda i: product(), iterations, warmup)
    # An n x n x n product: n^2 outputs, each n multiply-adds of 2 FLOPs.
    return Measurement(f"matmul {case.name} {n}^3", case.unit, 2.0 * n**3, timing)


@contextmanager
def _float32_matmul_precision(precision: str) -> Iterator[None]:
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def _randn(n: int, device: torch.device, seed: int) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(n, n, device=device, generator=generator)


def _float_product(dtype: torch.dtype) -> Callable[[int, torch.device], Callable[[], Any]]:
    def make(n: int, device: torch.device) -> Callable[[], Any]:
        a, b = _randn(n, device, 1).to(dtype), _randn(n, device, 2).to(dtype)
        out = torch.empty(n, n, dtype=dtype, device=device)
        return lambda: torch.matmul(a, b, out=out)

    return make


def _fp8_product(n: int, device: torch.device) -> Callable[[], Any]:
    """e4m3 operands in [-2, 2], B column-major as cuBLASLt wants it, bf16 out."""
    a = _randn(n, device, 1).clamp(-2, 2).to(torch.float8_e4m3fn)
    b = _randn(n, device, 2).clamp(-2, 2).to(torch.float8_e4m3fn).t()
    scale = torch.ones((), dtype=torch.float32, device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)


def _int8_product(n: int, device: torch.device) -> Callable[[], Any]:
    generator = torch.Generator(device=device).manual_seed(3)
    a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=device, generator=generator)
    b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=device, generator=generator)
    return lambda: torch._int_mm(a, b)


_MATMULS = (
    _MatmulCase("bf16", TENSOR_BF16, _float_product(torch.bfloat16)),
    _MatmulCase("fp16", TENSOR_FP16, _float_product(torch.float16)),
    _MatmulCase("tf32", TENSOR_TF32, _float_product(torch.float32), float32_precision="high"),
    _MatmulCase("fp32", SIMT_FP32, _float_product(torch.float32)),
    _MatmulCase("fp64", TENSOR_FP64, _float_product(torch.float64)),
    _MatmulCase("fp8", TENSOR_FP8, _fp8_product),
    _MatmulCase("int8", TENSOR_INT8, _int8_product),
)


def _measured_profile(datasheet: HardwareProfile | None, device: torch.device,
                      measurements: list[Measurement], iterations: int) -> HardwareProfile:
    props = torch.cuda.get_device_properties(device)
    reader = clock_reader(device)
    max_clock = _max_sm_clock(reader, datasheet, measurements)
    peaks = dict(datasheet.peaks) if datasheet else {}
    clocks = dict(datasheet.peak_clocks_mhz) if datasheet else {}
    for m in measurements:
        if m.unit is not None:
            peaks[m.unit] = m.rate
            # The rate held at the highest SM clock seen while it ran (max clock if unread).
            clocks[m.unit] = m.timing.sm_clock_mhz[1] if m.timing.sm_clock_mhz else max_clock
    bandwidths = [m for m in measurements if m.unit is None]
    base = datasheet.name if datasheet else "no catalog entry"
    notes = (f"measured by solforge calibrate (median of {iterations} cold-L2 iterations, "
             f"kernel records); DRAM = best of "
             + ", ".join(f"{m.name} {m.rate / 1e12:.2f} TB/s" for m in bandwidths)
             + f"; units not measured keep the datasheet figures ({base})")
    environment = _environment(device, reader, measurements)
    smem, regfile = _sm_storage(props, datasheet)
    return HardwareProfile(
        name=f"{datasheet.name if datasheet else _slug(props.name)}-measured",
        kind="measured",
        peaks=peaks,
        peak_clocks_mhz=clocks,
        dram_bytes_per_s=max(m.rate for m in bandwidths),
        l2_bytes=props.L2_cache_size,
        sm_count=props.multi_processor_count,
        smem_bytes_per_sm=smem,
        regfile_bytes_per_sm=regfile,
        tensor_memory_bytes_per_sm=datasheet.tensor_memory_bytes_per_sm if datasheet else 0,
        max_sm_clock_mhz=max_clock,
        sources=datasheet.sources if datasheet else (),
        notes=notes,
        environment=environment,
    )


def _max_sm_clock(reader: Any, datasheet: HardwareProfile | None,
                  measurements: list[Measurement]) -> float:
    read = reader.max_sm_clock() if reader is not None else None
    if read:
        return read
    if datasheet is not None:
        return datasheet.max_sm_clock_mhz
    seen = [m.timing.sm_clock_mhz[1] for m in measurements if m.timing.sm_clock_mhz]
    if not seen:
        raise HardwareError("cannot read this GPU's maximum SM clock (no NVML, no nvidia-smi) "
                            "and it has no catalog entry")
    return max(seen)


def _sm_storage(props: Any, datasheet: HardwareProfile | None) -> tuple[int, int]:
    """(shared memory, register file) bytes per SM: read off the device, else the datasheet's."""
    smem = getattr(props, "shared_memory_per_multiprocessor", 0)
    registers = getattr(props, "regs_per_multiprocessor", 0)  # 32-bit registers
    if smem and registers:
        return int(smem), 4 * int(registers)
    if datasheet is None:
        raise HardwareError("torch reports no shared memory or register count per SM for this "
                            "GPU, and it has no catalog entry")
    return datasheet.smem_bytes_per_sm, datasheet.regfile_bytes_per_sm


def _environment(device: torch.device, reader: Any,
                 measurements: list[Measurement]) -> dict[str, str]:
    sm = [clock for m in measurements if m.timing.sm_clock_mhz for clock in m.timing.sm_clock_mhz]
    mem = [clock for m in measurements if m.timing.mem_clock_mhz
           for clock in m.timing.mem_clock_mhz]
    driver = reader.driver_version() if reader is not None else None
    return {
        "gpu": torch.cuda.get_device_name(device),
        "driver": driver or "unknown",
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sm_clock_mhz": f"{min(sm):g}-{max(sm):g}" if sm else "unread",
        "mem_clock_mhz": f"{min(mem):g}-{max(mem):g}" if mem else "unread",
    }


def _slug(name: str) -> str:
    return name.replace("NVIDIA ", "").strip().replace(" ", "-")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"

