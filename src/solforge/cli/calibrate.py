"""`solforge calibrate`: measure this GPU's bandwidth and matmul rates into a profile JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.hardware.units import rate_label

if TYPE_CHECKING:
    from solforge.hardware.calibrate import Calibration, Measurement

console = make_console()


@app.command("calibrate")
def calibrate_command(
    device: str = typer.Option("cuda", "--device", help="CUDA device to measure."),
    output: str = typer.Option(None, "-o", "--output", help="Write the profile JSON here."),
    iterations: int = typer.Option(50, help="Timed iterations per measurement."),
) -> None:
    """Measure copy/reduction bandwidth and matmul rate per dtype; compare with the datasheet."""
    from solforge.hardware import save_profile
    from solforge.hardware.calibrate import calibrate

    result = calibrate(device=device, iterations=iterations)
    console.print(_table(result))
    for name, reason in result.skipped:
        console.print(f"[yellow]skipped[/] {name}: {reason}", highlight=False)
    if output is not None:
        calibration = {"measurements": [m.to_dict() for m in result.measurements],
                       "skipped": dict(result.skipped)}
        save_profile(result.profile, Path(output), extra={"calibration": calibration})
        console.print(f"wrote {output}", highlight=False)


def _table(result: Calibration) -> Table:
    environment = result.profile.environment
    table = Table(title=f"{environment['gpu']} (driver {environment['driver']}, "
                        f"torch {environment['torch']}, CUDA {environment['cuda']})")
    for column in ("measurement", "unit", "measured", "datasheet", "% of datasheet",
                   "median ms", "spread", "SM MHz"):
        table.add_column(column, justify="left" if column in ("measurement", "unit") else "right")
    for m in result.measurements:
        reference = _datasheet_figure(result, m)
        label = "TB/s" if m.unit is None else f"T{rate_label(m.unit)}"
        percent = f"{100 * m.rate / reference:.0f}%" if reference else "-"
        clocks = m.timing.sm_clock_mhz
        table.add_row(m.name, m.unit or "dram", f"{m.rate / 1e12:,.2f} {label}",
                      f"{reference / 1e12:,.2f} {label}" if reference else "-", percent,
                      f"{m.timing.median_ms:.3f}", f"{100 * m.timing.spread:.1f}%",
                      f"{clocks[0]:g}-{clocks[1]:g}" if clocks else "unread")
    return table


def _datasheet_figure(result: Calibration, m: Measurement) -> float | None:
    if result.datasheet is None:
        return None
    if m.unit is None:
        return result.datasheet.dram_bytes_per_s
    return result.datasheet.peaks.get(m.unit)
