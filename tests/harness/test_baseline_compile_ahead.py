"""The torch.compile baseline's graphs compiled ahead (harness/compile_ahead.py): what the
worker's own compile then finds in its caches, that nothing runs ahead, and the evaluation that
hands them to the baseline's worker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from solforge.data.trace import Status
from solforge.harness.compile_ahead import (
    MAX_INPUT_BYTES,
    WouldRunOnDevice,
    compilable,
    compile_workloads,
    empty_inputs,
    input_bytes,
    prepared,
    refuse_device_benchmarks,
    start_compile_ahead,
    stop_all,
)
from solforge.harness.evaluate import EvalConfig, EvaluationRun, evaluate_reference
from solforge.harness.sandbox import jit_cache, policy_for
from solforge.harness.supervisor import worker_env
from solforge.problem import load_problem, make_inputs, open_problem
from solforge.runners.base import EvalTask
from solforge.runners.prebuilt import compile_ahead_unit, needs_compile_ahead

TESTS = Path(__file__).resolve().parents[1]
SMALL = TESTS / "fixtures" / "harness" / "rmsnorm_small"

# The worker's own compile (worker.py: torch.compile(run, dynamic=False) on the real inputs),
# in a fresh process whose Inductor and Triton caches are the folder given; prints Inductor's
# FX-graph cache counters.
WORKERS_COMPILE = """
import json, sys
from pathlib import Path
import torch
from torch._dynamo.utils import counters
from solforge.problem import load_problem, make_inputs
from solforge.problem.reference import load_reference_module
problem = load_problem(Path(sys.argv[1]))
run = load_reference_module(problem.definition).run
for workload in problem.workloads:
    torch._dynamo.reset()
    torch.compile(run, dynamic=False)(*make_inputs(problem, workload, sys.argv[2]).values())
print(json.dumps(dict(counters["inductor"])))
"""


def _workers_compile(cache: Path, device: str) -> dict[str, int]:
    env = {**worker_env(device), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
           "TRITON_CACHE_DIR": str(cache / "triton")}
    done = subprocess.run([sys.executable, "-c", WORKERS_COMPILE, str(SMALL), device], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _finds_every_graph(tmp_path: Path, device: str) -> None:
    """Compiled ahead on empty inputs in another process and folder, the graphs are what the
    baseline's worker compiles from the real inputs: every one is an FX-graph cache hit in
    a copy of the folder; without it, every one is a miss. Without it means where a worker's
    caches start, a copy of the JIT template (jit_cache.py; empty where it could not be made):
    it holds none of these graphs, only what Inductor's first compile in a fresh folder would
    spend seconds of C++ builds probing the machine for."""
    problem = load_problem(SMALL)
    ahead = start_compile_ahead(problem, list(problem.workloads), torch.device(device),
                                tmp_path / "ahead", worker_env(device), processes=2)
    assert ahead is not None and len(ahead.children) == 2
    outcome = ahead.wait()
    assert outcome == {w.uuid: "compiled" for w in problem.workloads}
    copy = tmp_path / "copy"
    shutil.copytree(ahead.folder, copy)
    ahead.close()
    assert not ahead.folder.exists()
    template = jit_cache.template(device, policy_for((str(tmp_path),), device),
                                  worker_env(device))
    start = tmp_path / "template"
    start.mkdir()
    if template is not None:
        shutil.copytree(template, start, dirs_exist_ok=True)
    # Both once the compiles ahead have ended, side by side: each is a process of its own with
    # caches of its own, compiling on one thread (worker_env).
    with ThreadPoolExecutor(max_workers=2) as pool:
        found, cold = pool.map(lambda folder: _workers_compile(folder, device), (copy, start))
    workloads = len(problem.workloads)
    assert (found.get("fxgraph_cache_hit"), found.get("fxgraph_cache_miss")) == (workloads, None)
    assert (cold.get("fxgraph_cache_hit"), cold.get("fxgraph_cache_miss")) == (None, workloads)


@pytest.mark.slow
def test_the_workers_compile_finds_every_graph_compiled_ahead(tmp_path):
    _finds_every_graph(tmp_path, "cpu")


@pytest.mark.gpu
def test_on_the_gpu_the_workers_compile_finds_every_graph_compiled_ahead(tmp_path):
    """The same with Inductor's Triton kernels: what the H200 is to confirm."""
    _finds_every_graph(tmp_path, "cuda")


def test_nothing_runs_ahead(tmp_path):
    """A reference that would do something outside one graph is refused while it is traced
    (fullgraph): nothing of it runs, where without fullgraph Dynamo would run the rest
    eagerly."""
    problem = load_problem(SMALL)
    marker = tmp_path / "ran"
    side_effect = problem.definition.reference.replace(
        "    x = hidden_states.to(torch.float32)",
        f"    open({str(marker)!r}, 'w').write('ran')\n    x = hidden_states.to(torch.float32)")
    assert side_effect != problem.definition.reference
    effectful = replace(problem, definition=replace(problem.definition, reference=side_effect))
    workload = problem.workloads[0]
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        (refused,) = compile_workloads(effectful, [workload], torch.device("cpu")).values()
    assert refused != "compiled" and not marker.exists()


def test_inputs_have_the_workloads_layout():
    """What the graph specialises on (shapes, dtypes, strides, scalars) is the real inputs'."""
    problem = load_problem(SMALL)
    for workload in problem.workloads:
        real = list(make_inputs(problem, workload, "cpu").values())
        for empty, value in zip(empty_inputs(problem, workload, torch.device("cpu")), real,
                                strict=True):
            if isinstance(value, torch.Tensor):
                assert (empty.shape, empty.stride(), empty.dtype, empty.device) == \
                    (value.shape, value.stride(), value.dtype, value.device)
            else:
                assert empty == value


def test_only_workloads_known_without_running_anything_are_compiled_ahead():
    ragged = open_problem("fib/gqa_ragged_prefill_llama3_1_8b")
    assert compilable(ragged, list(ragged.workloads)) == []  # indptrs from custom code
    small = load_problem(SMALL)
    assert compilable(small, list(small.workloads)) == list(small.workloads)
    softmax = open_problem("l1/softmax_qwen3_8b_vocab_temperature")  # up to 4.6 GiB of logits
    kept = compilable(softmax, list(softmax.workloads))
    assert kept and len(kept) < len(softmax.workloads)
    assert all(input_bytes(softmax, w) <= MAX_INPUT_BYTES for w in kept)


@pytest.mark.slow
def test_the_compile_baselines_worker_gets_them(tmp_path):
    """Through evaluate_reference: the graphs are compiled ahead, copied into the sandboxed
    worker's caches, and the baseline passes; by default, nothing is started."""
    problem = load_problem(SMALL)
    said: list[str] = []
    config = EvalConfig(device="cpu", compile_ahead=True, reuse_baselines=False,
                        cache_dir=tmp_path / "cache",
                        workloads=tuple(w.uuid for w in problem.workloads))
    traces = evaluate_reference(problem, "compile", config, said.append)
    assert {t.evaluation.status for t in traces} == {Status.PASSED}
    assert f"torch.compile ahead: {len(problem.workloads)} of {len(problem.workloads)} " \
           "workloads" in said
    assert os.listdir(tmp_path / "cache" / "compile-ahead") == []  # removed once used
    default = EvaluationRun(problem, replace(config, compile_ahead=EvalConfig().compile_ahead))
    assert default.start_compile_ahead(list(problem.workloads)) is None  # off by default


def test_the_local_runner_compiles_only_a_compile_baseline_ahead():
    config = EvalConfig(device="cpu", compile_ahead=True)
    assert needs_compile_ahead(EvalTask(str(SMALL), config, baseline="compile"))
    off = replace(config, compile_ahead=False)  # the default: no job, the unit starts at once
    assert not needs_compile_ahead(EvalTask(str(SMALL), off, baseline="compile"))
    assert not needs_compile_ahead(EvalTask(str(SMALL), config, baseline="eager"))
    assert not needs_compile_ahead(EvalTask(str(SMALL), config, solution={"name": "x"}))


@pytest.mark.slow
def test_a_unit_compiled_ahead_by_the_runner_is_found_by_its_evaluation(tmp_path):
    """The runner's compile pool prepares the unit's graphs under a key of its definition,
    workloads and device; the unit's evaluation finds that folder, starts nothing, uses it
    and removes it. Off (the default), nothing is prepared."""
    problem = load_problem(SMALL)
    config = EvalConfig(device="cpu", compile_ahead=True, reuse_baselines=False,
                        cache_dir=tmp_path / "cache",
                        workloads=tuple(w.uuid for w in problem.workloads))
    task = EvalTask(str(SMALL), config, baseline="compile")
    folder = compile_ahead_unit(task)
    assert folder is not None and folder.parent == tmp_path / "cache" / "compile-ahead"
    assert prepared(problem, list(problem.workloads), torch.device("cpu"),
                    folder.parent) is not None
    said: list[str] = []
    traces = evaluate_reference(problem, "compile", config, said.append)
    assert {t.evaluation.status for t in traces} == {Status.PASSED}
    assert f"torch.compile ahead: {len(problem.workloads)} of {len(problem.workloads)} " \
           "workloads" in said
    assert not folder.exists()
    assert compile_ahead_unit(replace(task, config=replace(config, compile_ahead=False))) is None


def test_a_runner_stopping_ends_the_compiles_still_running(tmp_path):
    """A runner stopped at its deadline must not wait, at exit, for compiles it no longer
    needs: stop_all kills them, and their wait returns at once."""
    problem = load_problem(SMALL)
    ahead = start_compile_ahead(problem, list(problem.workloads), torch.device("cpu"),
                                tmp_path, worker_env("cpu"), processes=1)
    stop_all()
    began = time.monotonic()
    assert ahead.wait() == {}
    assert time.monotonic() - began < 10
    ahead.close()


def test_inductors_device_benchmark_is_refused_in_a_compile_ahead(monkeypatch):
    """On a GPU, Inductor's padding pass may time a matmul on the device while compiling; in a
    compile-ahead child it raises instead (that graph is left to the worker). On the CPU the
    pass does not run, and nothing is changed."""
    from torch._inductor.fx_passes import pad_mm

    monkeypatch.setattr(pad_mm, "_should_pad", pad_mm._should_pad)  # restored afterwards
    original = pad_mm._should_pad
    assert refuse_device_benchmarks(torch.device("cpu")) is None
    assert pad_mm._should_pad is original
    assert refuse_device_benchmarks(torch.device("cuda")) is None
    with pytest.raises(WouldRunOnDevice):
        pad_mm._should_pad(None, None, None, torch.ops.aten.mm)


@pytest.mark.gpu
def test_on_the_gpu_a_matmul_off_its_alignment_is_left_to_the_worker(tmp_path):
    """Whisper's fc1 at 1,500 tokens: M is off the matmul's alignment, so Inductor would time
    its padding on the device; at 16 tokens it is not, and the graph is compiled ahead."""
    problem = open_problem("l1/gemm_bias_gelu_whisper_large_v3_fc1")
    chosen = [w for w in problem.workloads if w.axes["M"] in (16, 1500)]
    ahead = start_compile_ahead(problem, chosen, torch.device("cuda"), tmp_path,
                                worker_env("cuda"), processes=1)
    found = ahead.wait()
    ahead.close()
    outcome = {w.axes["M"]: found[w.uuid] for w in chosen}
    assert outcome[16] == "compiled"
    assert outcome[1500].startswith("WouldRunOnDevice")
