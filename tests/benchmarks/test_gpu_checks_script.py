"""`benchmarks/run_gpu_checks.sh`: its resumable stages go on from the stores committed under
benchmarks/results, so a fresh GPU machine continues instead of starting over."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "run_gpu_checks.sh"


def _stage(tmp_path: Path, stage: str) -> tuple[str, object]:
    """Run one stage with a stand-in interpreter that records the output file it was given
    (`-o FILE`) and that file's content when the script called it; returns both."""
    record = tmp_path / "seen.txt"
    python = tmp_path / "python"
    python.write_text('#!/usr/bin/env bash\nwhile [ $# -gt 0 ]; do\n  if [ "$1" = -o ]; then\n'
                      '    echo "$2" > "$SEEN"; cat "$2" >> "$SEEN"\n  fi; shift\ndone\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "SEEN": str(record), "EXAMPLES": "x"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), stage], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    path, _, content = record.read_text().partition("\n")
    return path, json.loads(content)


@pytest.mark.parametrize(("stage", "committed", "name"), [
    ("examples", "h200-examples.json", "examples.json"),
    ("libraries", "h200-library-baselines.json", "library-baselines.json"),
])
def test_a_resumable_stage_starts_from_the_committed_store(tmp_path, stage, committed, name):
    path, content = _stage(tmp_path, stage)
    assert path == str(tmp_path / "out" / name)
    assert content == json.loads((REPO / "benchmarks/results" / committed).read_text())


def test_a_store_already_in_the_output_folder_is_kept(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "examples.json").write_text('{"examples": []}')
    assert _stage(tmp_path, "examples")[1] == {"examples": []}
