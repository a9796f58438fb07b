"""What the GPU scripts share: the machine they record, a timestamped log line, how a number is
written in their tables, and the cost benchmarks' device check and JSON record."""

from __future__ import annotations

import json
import time
from pathlib import Path
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


def checked_device(device: str, repeats: int) -> torch.device:
    """The device of a cost benchmark (`--device`, `--repeats`), refused with a message where
    it cannot run."""
    if repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: use --device cpu")
    return torch.device(device)


def write_record(record: dict[str, Any], output: Path | None) -> None:
    """The record as JSON into `output`, or on stdout without one."""
    text = json.dumps(record, indent=1) + "\n"
    if output:
        output.write_text(text)
        log(f"wrote {output}")
    else:
        print(text)


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
