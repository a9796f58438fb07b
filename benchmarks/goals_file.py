"""The goals file (NAME-goals.json): what suite_gpu.py and forge_gpu.py measured against the
project's goals, each script writing its own keys into the one file.

    suite_problems                      problems benched (eager and torch.compile measured)
    shipped {problems, median_fraction_of_sol, faster_than_compile}          suite_gpu.py
    forge {problems, median_fraction_of_sol, s_vs_eager, s_vs_best,
           beats_compile_share}                                              forge_gpu.py

A median fraction of the speed of light is taken over workloads, not problems, and only over
workloads with T_SOL >= 10 us: below that a single kernel's launch and tail (about 1 us on an
H200 even when empty) is a large share of T_SOL, so the fraction would measure the launch floor,
not the kernel. A workload that failed counts as 0.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIN_T_SOL_MS = 0.010  # workloads below this are left out of the fractions


def median_fraction_of_sol(times: Iterable[tuple[float, float | None]]) -> float | None:
    """Median of T_SOL / T_k over (T_SOL ms, T_k ms or None if failed) pairs with T_SOL at
    least MIN_T_SOL_MS; a failure is 0; None when no workload qualifies."""
    fractions = [0.0 if t_k is None else min(t_sol / t_k, 1.0)
                 for t_sol, t_k in times if t_sol >= MIN_T_SOL_MS]
    return statistics.median(fractions) if fractions else None


def goals_path(out: Path, name: str) -> Path:
    return out / f"{name}-goals.json"


def merge_goals(path: Path, part: dict[str, Any]) -> dict[str, Any]:
    """Write `part`'s keys into the goals file, keeping the keys the other script wrote."""
    goals = json.loads(path.read_text()) if path.is_file() else {}
    goals.update(part)
    path.write_text(json.dumps(goals, indent=1, sort_keys=True) + "\n")
    return goals
