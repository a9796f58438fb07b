"""The environment a trace was measured in: the device, the library versions and the sandbox's
protections (what isolated the candidate, or why a protection was missing); for a whole run,
also the driver and the clocks, since a time means little without the clock it ran at."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import torch

from solforge.data.trace import Environment
from solforge.measure.clocks import clock_reader


def environment(device: torch.device, sandbox: dict[str, str] | None = None) -> Environment:
    libs = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.version.cuda:
        libs["cuda"] = torch.version.cuda
    for package in ("triton", "solforge"):
        try:
            libs[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return Environment(hardware_name(device), libs, dict(sandbox or {}))


def run_environment(device: torch.device) -> dict[str, Any]:
    """What a results store keeps about a run's machine: the trace environment, the platform,
    and on a GPU the driver, the maximum SM clock and the clocks read at the start."""
    traced = environment(device)
    found: dict[str, Any] = {"hardware": traced.hardware, "libs": traced.libs,
                             "platform": platform.platform(), "cpu_count": os.cpu_count()}
    if device.type != "cuda":
        return found
    found["gpu"] = torch.cuda.get_device_name(device)
    reader = clock_reader(device)
    if reader is not None:
        clocks = reader.read()
        found["driver"] = reader.driver_version()
        found["max_sm_clock_mhz"] = reader.max_sm_clock()
        found["clocks_at_start_mhz"] = {"sm": clocks[0], "mem": clocks[1]} if clocks else None
    return found


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(" ", "_")
    return f"CPU_{platform.machine()}"
