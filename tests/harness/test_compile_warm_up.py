"""The compile warm-up of a candidate that uses torch.compile (worker._compile_once) starts
from the trusted JIT template: its graph is found in the template's Inductor cache and the
precompiled C++ headers in the template's TMPDIR, so on the CPU it generates, builds and
precompiles nothing (11-14 s per candidate on the 2-core machine when it did)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import Computed, selected_keys

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
FAILING = "the template's compile fails"  # the probe of the fallback test, beside the threads
READS = {"test_a_failed_template_compile_falls_back_to_a_pointwise_compile": [FAILING]}


@dataclass
class Probe:
    """A warm-up probe's process and the folders it started from (`skipped`: why it was not
    run)."""

    finished: subprocess.CompletedProcess | None = None
    tmp: Path | None = None  # its TMPDIR
    built_before: dict[str, float] | None = None  # the headers in it before the probe
    headers_kept: bool = False  # whether the template kept precompiled headers to copy
    skipped: str | None = None


def _prepare(case: str | None, folder: Path) -> tuple[Probe, list[str], dict[str, str]]:
    """The probe of `case` (OMP_NUM_THREADS, or FAILING), its command and environment: each
    starts where a worker's warm-up starts, from a copy of the JIT template of its thread
    count and of the template's precompiled headers."""
    if case == FAILING:
        env, argv = worker_env("cpu"), [sys.executable, "-c", _FAILING_TEMPLATE_PROBE]
    else:
        with pytest.MonkeyPatch.context() as patch:
            if case is None:
                patch.delenv("OMP_NUM_THREADS", raising=False)
            else:
                patch.setenv("OMP_NUM_THREADS", case)
            env, argv = worker_env("cpu"), [sys.executable, "-c", _PROBE]
    template = jit_cache.template("cpu", policy_for((str(folder),), "cpu"), env)
    if template is None and case != FAILING:
        return Probe(skipped="no JIT template on this machine (its warm-up failed)"), argv, env
    probe = Probe(tmp=folder / "tmp")
    if template is not None:
        shutil.copytree(template, folder / "cache")
        headers = jit_cache.headers(template)
        probe.headers_kept = headers is not None
        if headers is not None:
            shutil.copytree(headers, probe.tmp)
    probe.tmp.mkdir(exist_ok=True)
    probe.built_before = _built(probe.tmp)
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(folder / "cache" / "inductor"),
           "TMPDIR": str(probe.tmp)}
    if case != FAILING:
        env |= {"USER": "solforge-sandbox", "LOGNAME": "solforge-sandbox"}
    return probe, argv, python_env(env)


@pytest.fixture(scope="module")
def probes(request, tmp_path_factory) -> Computed:
    """The warm-up probes the selected tests read, by case, their processes side by side: each
    is a fresh interpreter compiling on one thread (worker_env), about a core's work."""
    def run(cases: list[str | None]) -> list[Probe]:
        prepared = [_prepare(case, tmp_path_factory.mktemp("warm-up")) for case in cases]
        running = [None if probe.skipped else
                   subprocess.Popen(argv, env=env, cwd=probe.tmp.parent, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for probe, argv, env in prepared]
        deadline = time.monotonic() + 300
        for (probe, argv, _), process in zip(prepared, running, strict=True):
            if process is None:
                continue
            try:
                out, err = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
                err += "\nthe probe ran past 300 s"
            probe.finished = subprocess.CompletedProcess(argv, process.returncode, out, err)
        return [probe for probe, _, _ in prepared]

    return Computed(run).fetch(selected_keys(request, "threads", reads=READS))


@pytest.mark.slow
@pytest.mark.parametrize("threads", [None, "1"])
def test_compile_warm_up_builds_nothing_from_the_template(probes, threads):
    """Whatever the thread count (the local runner gives each slot cores // slots): Inductor's
    graph keys name it, so one template warmed under another count would be all misses."""
    probe = probes[threads]
    if probe.skipped:
        pytest.skip(probe.skipped)
    assert probe.headers_kept, "the template keeps Inductor's precompiled headers"
    finished = probe.finished
    assert finished.returncode == 0, finished.stderr[-2000:]
    counters = json.loads(finished.stdout.strip().splitlines()[-1])
    assert counters.get("fxgraph_cache_hit") == 1 and not counters.get("fxgraph_cache_miss")
    assert _built(probe.tmp) == probe.built_before, "the precompiled headers were built again"


@pytest.mark.slow
def test_a_failed_template_compile_falls_back_to_a_pointwise_compile(probes):
    """The warm-up is the harness's: if the template's compile raises (it did for an honest
    candidate on an H100, 2026-12-06), the worker says so on stderr, marks the step, and still
    compiles once before the guards' snapshot. It starts where a worker's warm-up starts, from a
    copy of the template and its headers (without one, from empty folders), whose cache does
    not hold the pointwise function: its compile is a build, only without Inductor's first
    probes of the machine (seconds of C++ builds)."""
    finished = probes[FAILING].finished
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
