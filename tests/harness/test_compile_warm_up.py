"""The compile warm-up of a candidate that uses torch.compile (worker._compile_once) starts
from the trusted JIT template: its graph is found in the template's Inductor cache and the
precompiled C++ headers in the template's TMPDIR, so on the CPU it generates, builds and
precompiles nothing (11-14 s per candidate on the 2-core machine when it did)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.harness.process import python_env
from solforge.harness.sandbox import jit_cache, policy_for
from solforge.harness.supervisor import worker_env

_PROBE = """
import json, sys, torch
from torch._dynamo.utils import counters
from solforge.harness.worker import _compile_once
_compile_once(torch.device("cpu"))
print(json.dumps(dict(counters["inductor"])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("threads", [None, "1"])
def test_compile_warm_up_builds_nothing_from_the_template(tmp_path, monkeypatch, threads):
    """Whatever the thread count (the local runner gives each slot cores // slots): Inductor's
    graph keys name it, so one template warmed under another count would be all misses."""
    if threads is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
    env = worker_env("cpu")
    policy = policy_for((str(tmp_path),), "cpu")
    cache = jit_cache.template("cpu", policy, env)
    if cache is None:
        pytest.skip("no JIT template on this machine (its warm-up failed)")
    headers = jit_cache.headers(cache)
    assert headers is not None, "the template keeps Inductor's precompiled headers"
    shutil.copytree(cache, tmp_path / "cache")
    shutil.copytree(headers, tmp_path / "tmp")
    before = _built(tmp_path / "tmp")
    env = python_env({**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache" / "inductor"),
                      "TMPDIR": str(tmp_path / "tmp"), "USER": "solforge-sandbox",
                      "LOGNAME": "solforge-sandbox"})
    finished = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    counters = json.loads(finished.stdout.strip().splitlines()[-1])
    assert counters.get("fxgraph_cache_hit") == 1 and not counters.get("fxgraph_cache_miss")
    assert _built(tmp_path / "tmp") == before, "the precompiled headers were built again"


_FAILING_TEMPLATE_PROBE = """
import json, sys, torch
from torch._dynamo.utils import counters
import solforge.harness.sandbox.warm as warm
from solforge.harness import startup
from solforge.harness.worker import _compile_once

def broken(device):
    raise RuntimeError("the template's graph would not load")

warm.warm = broken
_compile_once(torch.device("cpu"))
print(json.dumps({"inductor": dict(counters["inductor"]),
                  "marks": [step for step, _ in startup.marks()]}))
"""


@pytest.mark.slow
def test_a_failed_template_compile_falls_back_to_a_pointwise_compile(tmp_path):
    """The warm-up is the harness's: if the template's compile raises (it did for an honest
    candidate on an H100, 2026-12-06), the worker says so on stderr, marks the step, and still
    compiles once before the guards' snapshot."""
    env = python_env({**worker_env("cpu"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
                      "TMPDIR": str(tmp_path)})
    finished = subprocess.run([sys.executable, "-c", _FAILING_TEMPLATE_PROBE], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "the template's graph would not load" in finished.stderr
    assert "compiling a pointwise function instead" in finished.stderr
    record = json.loads(finished.stdout.strip().splitlines()[-1])
    assert record["marks"] == ["compile_template_failed"]
    compiled = record["inductor"]
    assert compiled.get("fxgraph_cache_miss", 0) + compiled.get("fxgraph_cache_hit", 0) == 1


def test_the_warm_up_compiles_with_no_local_autotune_records(monkeypatch):
    """A graph loaded from the template keeps the path of the warm-up's own sandbox for its
    kernels' autotune records, a folder no later sandbox may write (PermissionError on an H100,
    2026-12-06): the warm-up's compile keeps no records, and leaves the setting as it was."""
    import torch
    import torch._inductor.config as inductor_config

    from solforge.harness.sandbox import warm

    seen = []

    def compile_(function, **options):
        seen.append(inductor_config.autotune_local_cache)
        return function

    monkeypatch.setattr(torch, "compile", compile_)
    warm.warm("cpu")
    assert seen == [False]
    assert inductor_config.autotune_local_cache is True


@pytest.mark.gpu
def test_on_the_gpu_a_sandbox_warms_up_from_the_template():
    """The worker's compile warm-up, as a candidate's sandbox runs it: from a copy of the
    template, under the sandbox's uid and write rules, with no fallback."""
    from solforge.harness.sandbox import launcher
    from solforge.harness.sandbox.box import Sandbox
    from solforge.harness.sandbox.driver import protected_driver

    env = worker_env("cuda")
    policy = policy_for((), "cuda")
    cache = jit_cache.template("cuda", policy, env)
    assert cache is not None, "the CUDA template's warm-up failed"
    sandbox = Sandbox(policy, warm_cache=cache)
    try:
        spec = sandbox.spec()
        argv = launcher.command([spec.to_json(), "solforge.harness.sandbox.warm", "cuda"])
        with protected_driver():
            finished = subprocess.run(argv, env=sandbox.env(env), cwd=spec.cwd,
                                      capture_output=True, text=True, timeout=300)
    finally:
        sandbox.remove()
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.strip().endswith("warm")


def test_cpu_templates_are_kept_per_thread_count():
    assert jit_cache.flavour("cpu", {}) == "cpu"
    assert jit_cache.flavour("cpu", {"OMP_NUM_THREADS": "1"}) == "cpu-threads-1"
    assert jit_cache.flavour("cpu", {"OMP_NUM_THREADS": " 4 "}) == "cpu-threads-4"
    assert jit_cache.flavour("cpu", {"OMP_NUM_THREADS": "bogus"}) == "cpu"
    assert jit_cache.flavour("cuda", {"OMP_NUM_THREADS": "1"}) == "cuda"


def _built(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.rglob("*.gch")}
