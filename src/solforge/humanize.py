"""Human-readable numbers for the command line (SI prefixes, times in the right unit)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float, unit: str = "") -> str:
    """1.23e9, "FLOP" -> "1.23 GFLOP"."""
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def duration_ms(ms: float) -> str:
    """A time given in milliseconds, shown in s, ms, us or ns."""
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 1:
        return f"{ms:.3g} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.3g} us"
    return f"{ms * 1e6:.3g} ns"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """"1 run", "2 runs"; `many` for irregular plurals ("1 entry", "2 entries")."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"


def fitness(value: float) -> str:
    """A fitness (a SOL score in [0, 1], or a CPU speedup that may be 1e-4 or 300) with three
    significant digits, never rounded to "0.000"."""
    if value == 0:
        return "0"
    return f"{value:.3g}"


# A time in ms times the factor reads in the unit: 0.0123 ms -> 12.3 us.
_TIME_UNITS = (("s", 1e-3), ("ms", 1.0), ("us", 1e3), ("ns", 1e6))


def time_unit(values_ms: Iterable[float]) -> tuple[str, float]:
    """One unit for a column of times, so the unit goes in the header once: the largest unit in
    which the column's largest time reads >= 1. Every cell then reads below 1000 (at most
    seven characters, "0.00512" for a time 5000x smaller)."""
    largest = max((v for v in values_ms if v is not None and v > 0), default=1.0)
    for unit, factor in _TIME_UNITS:
        if largest * factor >= 1:
            return unit, factor
    return _TIME_UNITS[-1]


def number(value: float) -> str:
    """Three significant digits below 1000 ("0.0123", "45.6"), whole thousands above
    ("12,345"), never an exponent a reader has to decode."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def time_range(times_ms: Sequence[float], factor: float) -> str:
    """"12.3" or "12.3-45.6" in the column's unit; "-" for none."""
    if not times_ms:
        return "-"
    low, high = min(times_ms), max(times_ms)
    if number(low * factor) == number(high * factor):
        return number(low * factor)
    return f"{number(low * factor)}-{number(high * factor)}"


def si_unit(values: Iterable[float], unit: str) -> tuple[str, float]:
    """One SI-prefixed unit for a column: the largest prefix in which its largest value reads
    >= 1 ("MB", 1e-6 for 24.6e3 and 134e6 bytes: 0.0246 and 134)."""
    largest = max((abs(v) for v in values if v), default=1.0)
    for scale, prefix in _PREFIXES:
        if largest >= scale:
            return f"{prefix}{unit}", 1 / scale
    return unit, 1.0
