"""What the resumable GPU scripts (suite_gpu.py, forge_gpu.py) share: the machine they record,
a timestamped log line, and how a number is written in their tables."""

from __future__ import annotations

import time
from typing import Any

import torch

from solforge.measure.environment import run_environment


def recorded_environment(device: str) -> dict[str, Any]:
    """The store's record of a run's machine (GPU, driver, clocks, library versions), with a
    one-line description for the tables."""
    found = run_environment(torch.device(device))
    libs = found["libs"]
    found["summary"] = (f"{found.get('gpu', found['hardware'])}, torch {libs['torch']}, triton "
                        f"{libs.get('triton', '-')}, CUDA {libs.get('cuda', '-')}, driver "
                        f"{found.get('driver', '-')}")
    return found


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def no_time_for(what: str, left_s: float, longest_s: float, margin_s: float) -> bool:
    """Whether the next piece of work may not end in time (the time left under the longest
    piece so far plus a margin); says so, for the next call to go on from there."""
    if left_s >= longest_s + margin_s:
        return False
    log(f"stopping before {what}: {left_s:.0f} s left, the longest so far took "
        f"{longest_s:.0f} s; run the same command again to go on")
    return True


def fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"
