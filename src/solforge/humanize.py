"""Human-readable numbers for the command line (SI prefixes, times in the right unit)."""

from __future__ import annotations

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
