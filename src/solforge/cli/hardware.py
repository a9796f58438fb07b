"""`solforge hardware list` and `solforge hardware show NAME`: GPU profiles and their sources."""

from __future__ import annotations

import typer
from rich.table import Table

from solforge.cli.app import app
from solforge.cli.console import console as make_console
from solforge.cli.tables import compact_table
from solforge.hardware import DATASHEETS, UNITS, HardwareProfile, load_profile
from solforge.hardware.units import rate_label

console = make_console()
hardware_app = typer.Typer(help="GPU profiles: peak rate per unit, bandwidth, on-chip capacity.",
                           no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")


@hardware_app.command("list")
def list_profiles() -> None:
    """The catalog: dense datasheet peaks of each GPU."""
    profiles = [load_profile(name) for name in DATASHEETS]
    columns = {
        "name": [p.name for p in profiles],
        "SMs": [str(p.sm_count) for p in profiles],
        "bf16 TF": [_tera(p, "tensor.bf16") for p in profiles],
        "fp8 TF": [_tera(p, "tensor.fp8") for p in profiles],
        "fp4 TF": [_tera(p, "tensor.fp4") for p in profiles],
        "DRAM TB/s": [f"{p.dram_bytes_per_s / 1e12:.2f}" for p in profiles],
        "L2 MiB": [f"{p.l2_bytes / 2**20:.1f}" for p in profiles],
        "on-chip MiB": [f"{p.onchip_bytes / 2**20:.1f}" for p in profiles],
    }
    table = compact_table("GPU catalog (dense datasheet peaks; TF: tensor-core TFLOP/s at the "
                          "clock the datasheet quotes)", columns, text={"name"}, keep=set(columns))
    console.print(table)


@hardware_app.command("show")
def show(name: str = typer.Argument(..., help="Catalog name, NAME@1500MHz, or a profile .json.")
         ) -> None:
    """Every peak of one profile, the clock it holds at, and where the figures came from."""
    profile = load_profile(name)
    console.print(profile.describe(), highlight=False)
    console.print(_peak_table(profile))
    console.print(f"DRAM {profile.dram_bytes_per_s / 1e12:.2f} TB/s (not clock-scaled); "
                  f"L2 {profile.l2_bytes:,} B; per SM: shared {profile.smem_bytes_per_sm:,} B, "
                  f"registers {profile.regfile_bytes_per_sm:,} B, tensor memory "
                  f"{profile.tensor_memory_bytes_per_sm:,} B; on-chip total "
                  f"{profile.onchip_bytes:,} B", highlight=False)
    if profile.notes:
        console.print(f"notes: {profile.notes}", highlight=False)
    for key, value in profile.environment.items():
        console.print(f"{key}: {value}", highlight=False)
    for source in profile.sources:
        console.print(f"source ({source.taken}): {source.url} - {source.covers}", highlight=False)


def _peak_table(profile: HardwareProfile) -> Table:
    fastest = profile.at_max_clock()
    table = Table(title=f"{profile.name} peaks ({profile.kind})")
    for column in ("unit", "peak", "at SM clock", f"at max clock ({profile.max_sm_clock_mhz:g})"):
        table.add_column(column, justify="left" if column == "unit" else "right")
    for unit in UNITS:
        if profile.has(unit):
            label = f"T{rate_label(unit)}"
            table.add_row(unit, f"{profile.peak(unit) / 1e12:,.1f} {label}",
                          f"{profile.peak_clocks_mhz[unit]:g} MHz",
                          f"{fastest.peak(unit) / 1e12:,.1f} {label}")
    return table


def _tera(profile: HardwareProfile, unit: str) -> str:
    return f"{profile.peak(unit) / 1e12:.0f}" if profile.has(unit) else "-"
