"""A GPU as the speed-of-light analysis sees it: peak rates per unit, bandwidth, on-chip capacity.

Every peak carries the SM clock it holds at, because the datasheets quote different units at
different clocks (Hopper's tensor-core figures at ~1830 MHz, its CUDA-core figures at ~1980 MHz)
and because a time is only physically impossible against the rate at the highest clock the chip
can reach. Arithmetic rates scale with the SM clock; DRAM bandwidth does not (it follows the
memory clock, which this model holds fixed).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from solforge.errors import HardwareError
from solforge.hardware.units import SIMT_FP32, TENSOR_BF16, UNITS, rate_label

KINDS = ("datasheet", "clock-locked", "measured")

_FIELDS = ("name", "kind", "peaks", "peak_clocks_mhz", "dram_bytes_per_s", "l2_bytes",
           "sm_count", "smem_bytes_per_sm", "regfile_bytes_per_sm", "tensor_memory_bytes_per_sm",
           "max_sm_clock_mhz", "sources", "notes", "environment")
_OPTIONAL = {"tensor_memory_bytes_per_sm", "sources", "notes", "environment"}
# Extra keys a profile file may carry and from_dict leaves alone: calibrate's raw measurements.
_EXTRA = {"calibration"}


@dataclass(frozen=True)
class Source:
    """Where figures came from: `covers` says which figures, `taken` the date they were read."""

    url: str
    taken: str
    covers: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "taken": self.taken, "covers": self.covers}


@dataclass(frozen=True)
class HardwareProfile:
    """Peaks per unit (FLOP/s; OP/s for tensor.int8), each at its SM clock in peak_clocks_mhz."""

    name: str
    kind: str  # one of KINDS
    peaks: dict[str, float]
    peak_clocks_mhz: dict[str, float]
    dram_bytes_per_s: float
    l2_bytes: int
    sm_count: int
    smem_bytes_per_sm: int
    regfile_bytes_per_sm: int
    max_sm_clock_mhz: float
    tensor_memory_bytes_per_sm: int = 0  # Blackwell's accumulator memory (TMEM); 0 before it
    sources: tuple[Source, ...] = ()
    notes: str = ""
    environment: dict[str, str] = field(default_factory=dict)  # GPU, driver, versions (measured)

    def __post_init__(self) -> None:
        _check_profile(self)

    def has(self, unit: str) -> bool:
        return unit in self.peaks

    def peak(self, unit: str) -> float:
        if unit not in UNITS:
            raise HardwareError(f"unknown compute unit {unit!r} (units: {', '.join(UNITS)})")
        if unit not in self.peaks:
            raise HardwareError(f"{self.name} has no {unit} unit "
                                f"(it has: {', '.join(self.peaks)})")
        return self.peaks[unit]

    @property
    def onchip_bytes(self) -> int:
        """Storage a kernel can keep data in without DRAM traffic: L2 plus every SM's shared
        memory, registers and tensor memory. The cache-aware traffic bound takes this as its
        capacity; counting all of it keeps that bound a floor."""
        per_sm = (self.smem_bytes_per_sm + self.regfile_bytes_per_sm
                  + self.tensor_memory_bytes_per_sm)
        return self.l2_bytes + self.sm_count * per_sm

    def at_clock(self, mhz: float) -> HardwareProfile:
        """This GPU with its SM clock locked at `mhz`: each peak scaled by mhz / its own clock."""
        if mhz == self.max_sm_clock_mhz and set(self.peak_clocks_mhz.values()) == {mhz}:
            return self  # already every peak at this clock
        if mhz <= 0 or mhz > self.max_sm_clock_mhz:
            raise HardwareError(f"{self.name}: cannot lock the SM clock at {mhz:g} MHz "
                                f"(its maximum is {self.max_sm_clock_mhz:g} MHz)")
        peaks = {unit: rate * mhz / self.peak_clocks_mhz[unit] for unit, rate in self.peaks.items()}
        note = f"every SM-clock peak of {self.name} scaled to {mhz:g} MHz; DRAM bandwidth unscaled"
        return replace(self, name=f"{self.name}@{mhz:g}MHz", kind="clock-locked", peaks=peaks,
                       peak_clocks_mhz=dict.fromkeys(peaks, mhz), max_sm_clock_mhz=mhz,
                       notes=_join(self.notes, note))

    def at_max_clock(self) -> HardwareProfile:
        """Every peak at the maximum boost clock: no kernel on this GPU can beat these rates.

        On a datasheet profile this is the floor the harness calls a time physically impossible
        against. On a measured profile it only scales what one library reached."""
        return self.at_clock(self.max_sm_clock_mhz)

    def describe(self) -> str:
        """One line: name, kind, SMs, the main matrix rate, DRAM, L2, maximum clock."""
        main = next((u for u in (TENSOR_BF16, SIMT_FP32) if u in self.peaks), None)
        rate = ""
        if main is not None:
            rate = (f", {main} {self.peaks[main] / 1e12:.1f} T{rate_label(main)} "
                    f"@ {self.peak_clocks_mhz[main]:g} MHz")
        return (f"{self.name} ({self.kind}): {self.sm_count} SMs{rate}, "
                f"DRAM {self.dram_bytes_per_s / 1e12:.2f} TB/s, "
                f"L2 {self.l2_bytes / 2**20:.1f} MiB, max SM clock {self.max_sm_clock_mhz:g} MHz")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "peaks": dict(self.peaks),
            "peak_clocks_mhz": dict(self.peak_clocks_mhz),
            "dram_bytes_per_s": self.dram_bytes_per_s,
            "l2_bytes": self.l2_bytes,
            "sm_count": self.sm_count,
            "smem_bytes_per_sm": self.smem_bytes_per_sm,
            "regfile_bytes_per_sm": self.regfile_bytes_per_sm,
            "tensor_memory_bytes_per_sm": self.tensor_memory_bytes_per_sm,
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "sources": [source.to_dict() for source in self.sources],
            "notes": self.notes,
            "environment": dict(self.environment),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "<profile>") -> HardwareProfile:
        """The inverse of to_dict; every defect is a HardwareError naming `origin` and the field."""
        if not isinstance(data, dict):
            raise HardwareError(f"{origin}: a hardware profile must be a JSON object")
        unknown = set(data) - set(_FIELDS) - _EXTRA
        if unknown:
            raise HardwareError(f"{origin}: unknown fields {sorted(unknown)}")
        missing = [name for name in _FIELDS if name not in data and name not in _OPTIONAL]
        if missing:
            raise HardwareError(f"{origin}: missing fields {missing}")
        try:
            return cls(
                name=str(data["name"]),
                kind=str(data["kind"]),
                peaks={str(u): float(v) for u, v in data["peaks"].items()},
                peak_clocks_mhz={str(u): float(v) for u, v in data["peak_clocks_mhz"].items()},
                dram_bytes_per_s=float(data["dram_bytes_per_s"]),
                l2_bytes=int(data["l2_bytes"]),
                sm_count=int(data["sm_count"]),
                smem_bytes_per_sm=int(data["smem_bytes_per_sm"]),
                regfile_bytes_per_sm=int(data["regfile_bytes_per_sm"]),
                tensor_memory_bytes_per_sm=int(data.get("tensor_memory_bytes_per_sm", 0)),
                max_sm_clock_mhz=float(data["max_sm_clock_mhz"]),
                sources=tuple(Source(**s) for s in data.get("sources", [])),
                notes=str(data.get("notes", "")),
                environment={str(k): str(v) for k, v in data.get("environment", {}).items()},
            )
        except HardwareError as exc:
            raise HardwareError(f"{origin}: {exc}") from None
        except (AttributeError, TypeError, ValueError) as exc:
            raise HardwareError(f"{origin}: malformed profile: {exc}") from None


def _check_profile(profile: HardwareProfile) -> None:
    if profile.kind not in KINDS:
        raise HardwareError(f"{profile.name}: kind {profile.kind!r} is not one of {KINDS}")
    for unit, rate in profile.peaks.items():
        if unit not in UNITS:
            raise HardwareError(f"{profile.name}: unknown unit {unit!r} in peaks "
                                f"(units: {', '.join(UNITS)})")
        if not rate > 0:
            raise HardwareError(f"{profile.name}: peak of {unit} must be positive, got {rate}")
        if not profile.peak_clocks_mhz.get(unit, 0) > 0:
            raise HardwareError(f"{profile.name}: {unit} has no positive clock in peak_clocks_mhz")
    positive = {"dram_bytes_per_s": profile.dram_bytes_per_s, "l2_bytes": profile.l2_bytes,
                "sm_count": profile.sm_count, "max_sm_clock_mhz": profile.max_sm_clock_mhz}
    for name, value in positive.items():
        if not value > 0:
            raise HardwareError(f"{profile.name}: {name} must be positive, got {value}")


def _join(notes: str, more: str) -> str:
    return f"{notes}; {more}" if notes else more
