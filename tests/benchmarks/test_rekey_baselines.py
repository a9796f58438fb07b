"""benchmarks/rekey_baselines.py: an exported baseline keeps its time under the key that covers
the definition only when it was measured after the definition last changed in git."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from solforge.harness.baseline import EXPORT_FORMAT, cache_key
from solforge.problem import open_problem
from solforge.problem.suite import bundled_problem_dirs

REPO = Path(__file__).resolve().parents[2]
PROBLEM = "rmsnorm_llama3_1_8b"
CONTEXT = {"driver": "580", "hardware": "NVIDIA_H200", "method": "kernel", "warmup": 10}


def _entry(stamp: str | None, definition: str = PROBLEM) -> dict:
    folder = next(f for f in bundled_problem_dirs() if f.name == PROBLEM)
    workload = open_problem(folder).workloads[0]
    trace = {"evaluation": {"timestamp": stamp}} if stamp else None
    return {"key": "an old key", "median_ms": 1.5, "definition": definition,
            "workload": workload.uuid, "kind": "eager", **CONTEXT, "trace": trace}


def test_rekey_keeps_what_was_timed_on_the_current_definition(tmp_path):
    export = tmp_path / "baselines.json"
    entries = [_entry("2999-01-01T00:00:00+00:00"),  # after any change: kept
               _entry("2000-01-01T00:00:00+00:00"),  # before the definition was written
               _entry(None),  # no timestamp: cannot tell
               _entry("2999-01-01T00:00:00+00:00", definition="not_bundled")]
    export.write_text(json.dumps({"format": EXPORT_FORMAT, "baselines": entries}))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "rekey_baselines.py"),
                           str(export)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (kept,) = json.loads(export.read_text())["baselines"]
    folder = next(f for f in bundled_problem_dirs() if f.name == PROBLEM)
    problem = open_problem(folder)
    assert kept["key"] == cache_key(problem, problem.workloads[0], "eager", CONTEXT)[0]
    assert kept["median_ms"] == 1.5
    assert "'definition changed since': 1" in done.stdout and "'not bundled': 1" in done.stdout
