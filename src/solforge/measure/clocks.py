"""Read a GPU's SM and memory clocks, its maximum SM clock and the driver version.

A kernel time means little without the clock it ran at: the same kernel runs ~8% slower at
1830 MHz than at 1980 MHz. NVML (the `nvidia-ml-py` package, imported as `pynvml`) reads the
clocks in microseconds; without it `nvidia-smi` does, at tens of milliseconds a call, so a
sampler reads it only at the start and end of a run. Only reads: nothing here sets a clock.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class ClockReader:
    """Reads one GPU's clocks through NVML (`handle`) or nvidia-smi (`smi_id`)."""

    handle: Any = None
    smi_id: str | None = None

    @property
    def cheap(self) -> bool:
        return self.handle is not None

    def read(self) -> tuple[float, float] | None:
        """(SM MHz, memory MHz) now, or None if the clocks cannot be read."""
        if self.handle is not None:
            import pynvml

            try:
                sm = pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM)
                mem = pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_MEM)
            except pynvml.NVMLError:
                return None
            return float(sm), float(mem)
        values = _smi_query(self.smi_id, "clocks.sm,clocks.mem")
        if values is None or len(values) != 2:
            return None
        return float(values[0]), float(values[1])

    def max_sm_clock(self) -> float | None:
        if self.handle is not None:
            import pynvml

            return float(pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
        values = _smi_query(self.smi_id, "clocks.max.sm")
        return float(values[0]) if values else None

    def driver_version(self) -> str | None:
        if self.handle is not None:
            import pynvml

            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        values = _smi_query(self.smi_id, "driver_version")
        return values[0] if values else None


@dataclass
class ClockSampler:
    """Collects clock samples over a run and reports the range seen."""

    reader: ClockReader | None
    sm_mhz: list[float] = field(default_factory=list)
    mem_mhz: list[float] = field(default_factory=list)

    def sample(self, force: bool = False, keep: bool = True) -> None:
        """Read the clocks now (a slow reader only when `force`); record them when `keep`."""
        if self.reader is None or not (self.reader.cheap or force):
            return
        clocks = self.reader.read()
        if clocks is not None and keep:
            self.sm_mhz.append(clocks[0])
            self.mem_mhz.append(clocks[1])

    def sm_range(self) -> tuple[float, float] | None:
        return (min(self.sm_mhz), max(self.sm_mhz)) if self.sm_mhz else None

    def mem_range(self) -> tuple[float, float] | None:
        return (min(self.mem_mhz), max(self.mem_mhz)) if self.mem_mhz else None


def clock_reader(device: torch.device | str | int | None = None) -> ClockReader | None:
    """A reader for a CUDA device: NVML when importable, else nvidia-smi, else None."""
    index = cuda_index(device)
    uuid = _device_uuid(index)
    handle = _nvml_handle(index, uuid)
    if handle is not None:
        return ClockReader(handle=handle)
    if shutil.which("nvidia-smi") is None:
        return None
    return ClockReader(smi_id=uuid or str(index))


def cuda_index(device: torch.device | str | int | None) -> int:
    """The CUDA ordinal of `device`; the current device when it names none."""
    if isinstance(device, int):
        return device
    index = torch.device(device).index if device is not None else None
    return torch.cuda.current_device() if index is None else index


def _device_uuid(index: int) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else None


def _nvml_handle(index: int, uuid: str | None) -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if uuid is not None:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        return None


def _smi_query(smi_id: str | None, fields: str) -> list[str] | None:
    command = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
    if smi_id is not None:
        command += ["-i", smi_id]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    if not lines:
        return None
    return [value.strip() for value in lines[0].split(",")]
