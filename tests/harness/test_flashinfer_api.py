"""The library baselines' FlashInfer calls against FlashInfer's real Python API (flashinfer_api.py),
where SOLFORGE_TEST_FLASHINFER_SITE names a folder that holds flashinfer-python: CI installs it
there, out of every other test's way. FlashInfer's kernels cannot run on the CPU; its API can be
read, and a call it would refuse on the GPU fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SITE_ENV = "SOLFORGE_TEST_FLASHINFER_SITE"


def test_every_flashinfer_baseline_calls_the_real_api(tmp_path):
    site = os.environ.get(SITE_ENV)
    if not site or not (Path(site) / "flashinfer").is_dir():
        pytest.skip(f"{SITE_ENV} does not name a folder with flashinfer-python in it")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, str(TESTS)]),
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}  # its import writes a log there
    done = subprocess.run([sys.executable, str(TESTS / "flashinfer_api.py")], env=env,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) >= 12 and all(line.endswith(": ok") for line in lines), done.stdout
