"""The environment a trace was measured in: the device and the library versions."""

from __future__ import annotations

import platform
from importlib import metadata

import torch

from solforge.harness.trace import Environment


def environment(device: torch.device) -> Environment:
    libs = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.version.cuda:
        libs["cuda"] = torch.version.cuda
    for package in ("triton", "solforge"):
        try:
            libs[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return Environment(hardware_name(device), libs)


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(" ", "_")
    return f"CPU_{platform.machine()}"
