"""benchmarks/launch_floor.py kept working without a GPU: its CPU mode (Triton's interpreter,
the host timer) times every kernel and writes the floor as the report reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from solforge.report.tables import launch_floor_ms

REPO = Path(__file__).resolve().parents[2]


def test_launch_floor_cpu_mode_writes_the_floor(tmp_path):
    out = tmp_path / "floor.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "launch_floor.py"),
                           "--device", "cpu", "--iterations", "3", "-o", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    kernels = result["kernels"]
    assert len(kernels) == 4 and result["timing"] == "cpu"
    near_empty = [k["cold_median_us"] for k in kernels.values() if k["near_empty"]]
    assert len(near_empty) == 3 and result["floor_us"] == min(near_empty)
    assert all(k["cold_min_us"] <= k["cold_median_us"] for k in kernels.values())
    assert launch_floor_ms(out) == result["floor_us"] / 1000
