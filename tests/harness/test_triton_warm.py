"""A worker's first Triton launch is the harness's own, so a candidate's first call imports none
of Triton's modules while it holds the GPU (harness/triton_warm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from solforge.harness import triton_warm

pytest.importorskip("triton")


def test_on_the_cpu_nothing_is_launched():
    assert triton_warm.launch_once(torch.device("cpu")) is False


CANDIDATE = '''
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
'''

# A worker's order: the harness's warm-up (or none), the candidate's import, its first call.
PROBE = '''
import json, sys, torch
from solforge.harness import triton_warm
warmed = triton_warm.launch_once(torch.device("cuda")) if sys.argv[1] == "warm" else None
sys.path.insert(0, sys.argv[2])
import candidate
before = set(sys.modules)
x = torch.arange(1000, device="cuda", dtype=torch.float32)
out = torch.empty_like(x)
candidate.add_one[(4,)](x, out, 1000, BLOCK=256)
torch.cuda.synchronize()
imported = sorted(name for name in set(sys.modules) - before if name.startswith("triton"))
print(json.dumps({"warmed": warmed, "imported": imported, "right": bool((out == x + 1).all())}))
'''


@pytest.mark.gpu
def test_after_the_harness_launch_a_candidates_first_launch_imports_nothing(tmp_path):
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    seen = {}
    for mode in ("cold", "warm"):
        env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(tmp_path / f"cache-{mode}")
        finished = subprocess.run([sys.executable, "-c", PROBE, mode, str(tmp_path)], env=env,
                                  capture_output=True, text=True, timeout=600)
        assert finished.returncode == 0, finished.stderr[-2000:]
        seen[mode] = json.loads(finished.stdout.strip().splitlines()[-1])
    assert seen["cold"]["imported"], "a first launch in a fresh process imports Triton modules"
    assert seen["warm"] == {"warmed": True, "imported": [], "right": True}
