"""Run defaults, decided here for every command: the device, the hardware profile T_SOL is
priced on, and the baseline T_b.

- Device: "cuda" when this machine has a GPU, or when the work goes to a Ray cluster (whose
  runner says so when the cluster has none); else "cpu".
- Profile: the one named (--hardware); else the datasheet of the GPU the work runs on, read
  where it runs (a runner's probe of its machine); in CPU mode, where nothing is scored, the H200.
- Baseline: "best" (the faster of eager and torch.compile) on a GPU; "eager" on the CPU, whose
  timings are not scored and where torch.compile costs minutes per problem.

bench, eval, optimize, analyze and the benchmark scripts all call `resolve_run`; the harness and the
runners call `resolve_device` and `resolve_profile` on the machine that does the work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from solforge.errors import HardwareError, SolforgeError
from solforge.hardware.profile import HardwareProfile

DEVICE_TYPES = ("cuda", "cpu")
DEFAULT_BASELINE = {"cuda": "best", "cpu": "eager"}
BASELINE_CHOICES = ("eager", "compile", "best")
CPU_MODE_PROFILE = "H200"  # CPU timings are not scored; the analysis still names a GPU


@dataclass(frozen=True)
class RunDefaults:
    device: str  # as given ("cuda:1") or chosen ("cuda", "cpu")
    device_type: str  # "cuda" or "cpu"
    hardware: str | None  # the named profile; None: the GPU the work runs on
    baseline: str  # eager | compile | best

    def profile(self) -> HardwareProfile:
        """The profile T_SOL is priced on when the work runs on this machine."""
        return resolve_profile(self.hardware, resolve_device(self.device))


def resolve_run(device: str | None = None, hardware: str | None = None,
                baseline: str | None = None, remote: bool = False) -> RunDefaults:
    """The run's settings with every default filled in. `remote`: the work runs on a Ray
    cluster, so only a device of this machine must exist here."""
    device_type = _device_type(device, remote)
    chosen = baseline or DEFAULT_BASELINE[device_type]
    if chosen not in BASELINE_CHOICES:
        raise SolforgeError(f"unknown baseline {chosen!r} (choose from "
                            f"{', '.join(BASELINE_CHOICES)})")
    return RunDefaults(device or device_type, device_type, hardware or None, chosen)


def _device_type(device: str | None, remote: bool) -> str:
    if not remote:
        return resolve_device(device or ("cuda" if torch.cuda.is_available() else "cpu")).type
    try:
        kind = torch.device(device or "cuda").type
    except RuntimeError:
        kind = None
    if kind not in DEVICE_TYPES:
        raise SolforgeError(f"unsupported device {device!r} (cuda or cpu)")
    return kind


def resolve_device(name: str) -> torch.device:
    """A device of this machine: "cpu", or a CUDA device that exists (with its index)."""
    unsupported = SolforgeError(f"unsupported device {name!r} (cuda or cpu)")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise unsupported from None
    if device.type not in DEVICE_TYPES:
        raise unsupported
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SolforgeError("--device cuda: no CUDA device is available (use --device cpu)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_profile(spec: str | None, device: torch.device) -> HardwareProfile:
    """The hardware T_SOL is priced on: named, else the GPU `device` is, else (CPU) an H200."""
    from solforge.hardware import datasheet_for_device, load_profile

    if spec:
        return load_profile(spec)
    if device.type == "cpu":
        return load_profile(CPU_MODE_PROFILE)
    name = torch.cuda.get_device_name(device)
    sheet = datasheet_for_device(name)
    if sheet is None:
        raise HardwareError(f"no datasheet for {name!r}: name the hardware with --hardware")
    return sheet.profile()


def run_profile(hardware: str | None, present: HardwareProfile) -> HardwareProfile:
    """The profile of a run whose units run elsewhere: the named one, else `present`, the
    profile the runner's probe read on the machine the units run on."""
    from solforge.hardware import load_profile

    return load_profile(hardware) if hardware else present
