"""On a GPU the optimizer compiles each candidate's kernels for every workload the harness will
time, on meta tensors, in a sandboxed process beside the judging (capture.compile_ahead), and
keeps that Triton cache for the candidate's worker: Triton, given it, compiles nothing for the
workloads' real arguments. That is the first calls' JIT compile taken off the GPU's critical
path (harness/sandbox/jit_ahead.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import write_problem

from solforge.data.solution import parse_solution, solution_from_python
from solforge.forge import capture, descriptors
from solforge.forge.capture import compile_ahead
from solforge.forge.descriptors import Descriptor
from solforge.forge.loop import OptimizeConfig, Optimizer
from solforge.forge.templates import template_named
from solforge.harness.sandbox import jit_ahead
from solforge.problem.problem import load_problem
from solforge.problem.suite import open_problem
from solforge.store import Store

ADD = {
    "name": "add", "op_type": "elementwise",
    "axes": {"n": {"type": "var"}},
    "inputs": {"x": {"shape": ["n"], "dtype": "float32"},
               "y": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"out": {"shape": ["n"], "dtype": "float32"}},
    "reference": "def run(x, y):\n    return x + y\n",
}
# Destination-passing, as the templates are; n divisible by 16 or not is two specialisations.
ADD_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def run(x, y, out):
    n = x.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
'''
# Triton's JIT on the workloads' real arguments (CPU tensors, Triton out of interpreter mode),
# through the same specialisation as the worker's first call; prints the cache's kernels after.
CONSUMER = '''
import json, sys
from pathlib import Path
from solforge.data.solution import parse_solution
from solforge.forge.capture import capture_kernels, workload_arguments
from solforge.problem.problem import load_problem

solution = parse_solution(json.loads(Path(sys.argv[1]).read_text()))
problem = load_problem(sys.argv[2])
for workload in problem.workloads:
    capture_kernels(solution, workload_arguments(solution, problem, workload, "cpu"), sass=False)
print(json.dumps(sorted(p.parent.name for p in Path(sys.argv[3]).rglob("*.cubin"))))
'''


def _kernels(cache: Path) -> list[str]:
    return sorted(path.parent.name for path in cache.rglob("*.cubin"))


def _launchers(cache: Path) -> list[str]:
    return sorted(path.parent.name for path in cache.rglob("__triton_launcher*"))


def test_kernels_compiled_ahead_are_the_workers_cache_hits(tmp_path):
    problem = load_problem(write_problem(tmp_path / "add", ADD,
                                         [{"axes": {"n": 8192}}, {"axes": {"n": 8190}}]))
    solution = replace(solution_from_python(ADD_SOURCE, "add"), destination_passing_style=True)
    root = tmp_path / "ahead"
    assert compile_ahead(solution, problem, problem.workloads,
                         lambda cache: jit_ahead.keep(cache, root, solution)) == 2
    kept = jit_ahead.folder(root, solution)
    assert len(_kernels(kept)) == 2, "one kernel per specialisation (n % 16 == 0 or not)"

    cache = tmp_path / "worker-cache"
    shutil.copytree(kept, cache)
    (tmp_path / "solution.json").write_text(json.dumps(solution.to_dict()))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    finished = subprocess.run([sys.executable, "-c", CONSUMER, str(tmp_path / "solution.json"),
                               str(problem.root), str(cache)], env=env, capture_output=True,
                              text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    after = json.loads(finished.stdout.strip().splitlines()[-1])
    assert after == _kernels(kept), "Triton compiled a kernel the ahead cache should have held"


# Triton's launcher for each compiled kernel, built by capture_kernels(launchers=True) through
# the CUDA backend's CudaLauncher (replaced here by a recorder: this machine may have no CUDA
# driver library); argv[3] is "fail" to make every build fail as it does without libcuda.
LAUNCHER_RECORDER = '''
import json, sys
from pathlib import Path
import triton.backends.nvidia.driver as nvidia
from solforge.data.solution import parse_solution
from solforge.forge.capture import capture_kernels, workload_arguments
from solforge.problem.problem import load_problem

built = []

class Recorder:
    def __init__(self, src, metadata):
        if sys.argv[3] == "fail":
            raise AssertionError("libcuda.so cannot found!")
        built.append([src.fn.__name__, metadata.hash])

nvidia.CudaLauncher = Recorder
solution = parse_solution(json.loads(Path(sys.argv[1]).read_text()))
problem = load_problem(sys.argv[2])
counts = []
for launchers in (True, False):
    for workload in problem.workloads:
        arguments = workload_arguments(solution, problem, workload, "cpu")
        counts.append(len(capture_kernels(solution, arguments, sass=False, launchers=launchers)))
print(json.dumps({"built": built, "kernels": counts}))
'''


@pytest.mark.parametrize("outcome", ["build", "fail"])
def test_the_capture_builds_each_kernels_launcher_when_asked(tmp_path, outcome):
    """Kept with the kernels, the launchers spare the worker's first call the C compiler; one
    that cannot be built (no CUDA driver library) is only left to the worker."""
    problem = load_problem(write_problem(tmp_path / "add", ADD,
                                         [{"axes": {"n": 8192}}, {"axes": {"n": 8190}}]))
    solution = replace(solution_from_python(ADD_SOURCE, "add"), destination_passing_style=True)
    (tmp_path / "solution.json").write_text(json.dumps(solution.to_dict()))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    finished = subprocess.run([sys.executable, "-c", LAUNCHER_RECORDER,
                               str(tmp_path / "solution.json"), str(problem.root), outcome],
                              env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert result["kernels"] == [1, 1, 1, 1]
    if outcome == "fail":
        assert result["built"] == []
        return
    assert [name for name, _ in result["built"]] == ["_add", "_add"], \
        "one launcher per compiled kernel, none when not asked"
    assert len({digest for _, digest in result["built"]}) == 2, \
        "n divisible by 16 or not: two kernels (their launchers' source is one)"


AUTOTUNED_ADD_SOURCE = ADD_SOURCE.replace("@triton.jit\n", """@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512}, num_warps=8),
             triton.Config({"BLOCK": 1024})],
    key=["n"])
@triton.jit
""", 1).replace("_add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)",
                "_add[lambda meta: (triton.cdiv(n, meta['BLOCK']),)](x, y, out, n)")
# Triton's JIT on the workloads' real arguments in every autotune config, as the worker's
# autotuner compiles them before it times them; prints the cache's kernels after.
EVERY_CONFIG_CONSUMER = CONSUMER.replace(
    "    capture_kernels(solution, workload_arguments(solution, problem, workload, \"cpu\"), "
    "sass=False)",
    "    for config in range(3):\n"
    "        capture_kernels(solution, workload_arguments(solution, problem, workload, \"cpu\"),"
    " autotune_config=config, sass=False)")


@pytest.mark.parametrize("every_config", [False, True])
def test_every_config_of_an_autotuned_kernel_can_be_compiled_ahead(tmp_path, every_config):
    """A bench's solutions are autotuned; their workers compile every config before timing
    any, so the kernels compiled ahead are every config's (bench/ahead.py)."""
    assert EVERY_CONFIG_CONSUMER != CONSUMER
    problem = load_problem(write_problem(tmp_path / "add", ADD,
                                         [{"axes": {"n": 8192}}, {"axes": {"n": 8190}}]))
    solution = replace(solution_from_python(AUTOTUNED_ADD_SOURCE, "add"),
                       destination_passing_style=True)
    root = tmp_path / "ahead"
    assert compile_ahead(solution, problem, problem.workloads,
                         lambda cache: jit_ahead.keep(cache, root, solution),
                         every_config=every_config) == 2
    kept = _kernels(jit_ahead.folder(root, solution))
    assert len(kept) == (6 if every_config else 2), "3 configs x 2 specialisations"
    if not every_config:
        return
    cache = tmp_path / "worker-cache"
    shutil.copytree(jit_ahead.folder(root, solution), cache)
    (tmp_path / "solution.json").write_text(json.dumps(solution.to_dict()))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    finished = subprocess.run([sys.executable, "-c", EVERY_CONFIG_CONSUMER,
                               str(tmp_path / "solution.json"), str(problem.root), str(cache)],
                              env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert json.loads(finished.stdout.strip().splitlines()[-1]) == kept, \
        "the autotuner's configs compiled a kernel the ahead cache should have held"


def test_the_optimizer_keeps_kernels_ahead_on_a_gpu_only(tmp_path, monkeypatch):
    problem = load_problem(write_problem(tmp_path / "add", ADD,
                                         [{"axes": {"n": 8192}}, {"axes": {"n": 8190}}]))
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")
    solution = replace(solution_from_python(ADD_SOURCE, "add"), destination_passing_style=True)
    calls = []

    def ahead(solution, problem, workloads, keep_triton):
        calls.append(("ahead", [w.uuid for w in workloads]))
        cache = tmp_path / "triton"
        (cache / "H1").mkdir(parents=True, exist_ok=True)
        (cache / "H1" / "k.cubin").write_bytes(b"cubin")
        keep_triton(cache)
        return len(workloads)

    def describe(solution, problem, workload, device):
        calls.append(("describe", device))
        return Descriptor("plain", "cuda_core", "tile_per_program", "small", ())

    monkeypatch.setattr(capture, "compile_ahead", ahead)
    monkeypatch.setattr(descriptors, "describe_solution", describe)
    root = tmp_path / "cache" / jit_ahead.FOLDER
    config = {"budget": 1, "baseline": "eager", "cache_dir": tmp_path / "cache"}
    gpu = Optimizer(problem, store, OptimizeConfig(device="cuda", **config), lambda line: None)
    assert gpu._describe(solution.to_dict())[1] == "plain/cuda_core/tile_per_program/small"
    # First (its worker may start before the description ends), every workload the GPU times.
    assert calls == [("ahead", ["w0", "w1"]), ("describe", "cuda")]
    assert (jit_ahead.folder(root, solution) / "H1" / "k.cubin").read_bytes() == b"cubin"
    gpu._discard_ahead()
    assert not jit_ahead.folder(root, solution).exists()

    cpu = Optimizer(problem, store, OptimizeConfig(device="cpu", **config), lambda line: None)
    cpu._describe(solution.to_dict())
    assert calls[2:] == [("describe", "cpu")]  # Triton's interpreter compiles nothing


# The worker's own path on a GPU: Triton's JIT launching each kernel for real on every
# workload's CUDA arguments; prints the cache's kernels after.
GPU_CONSUMER = '''
import importlib, json, sys, torch
from pathlib import Path
from solforge.data.solution import parse_solution
from solforge.forge.capture import workload_arguments
from solforge.problem.problem import load_problem

solution = parse_solution(json.loads(Path(sys.argv[1]).read_text()))
problem = load_problem(sys.argv[2])
folder = Path(sys.argv[4])
solution.write_sources(folder)
sys.path.insert(0, str(folder))
module = solution.entry_file.removesuffix(".py").replace("/", ".")
entry = getattr(importlib.import_module(module), solution.entry_function)
for workload in problem.workloads:
    entry(*workload_arguments(solution, problem, workload, "cuda"))
torch.cuda.synchronize()
print(json.dumps([sorted(p.parent.name for p in Path(sys.argv[3]).rglob(pattern))
                  for pattern in ("*.cubin", "__triton_launcher*")]))
'''


@pytest.mark.gpu
@pytest.mark.parametrize("template", ["gemm", "gemm_tma"])
def test_on_the_gpu_the_jit_finds_every_kernel_compiled_ahead(tmp_path, template):
    """The specialisation made on meta tensors is the one Triton's JIT makes when the worker
    calls the candidate on CUDA tensors, TMA descriptors included."""
    problem = open_problem("l1/gemm_llama3_1_8b_o_proj")
    chosen = template_named(template)
    params = next(p for p in chosen.configurations() if chosen.invalid_reason(p, problem) is None)
    solution = parse_solution(chosen.render(params, problem))
    root = tmp_path / "ahead"
    assert compile_ahead(solution, problem, problem.workloads,
                         lambda cache: jit_ahead.keep(cache, root, solution)) == len(
                             problem.workloads)
    kept = _kernels(jit_ahead.folder(root, solution))
    launchers = _launchers(jit_ahead.folder(root, solution))
    assert kept
    assert launchers, "the capture built the kernels' launchers (one per signature)"
    cache = tmp_path / "worker-cache"
    shutil.copytree(jit_ahead.folder(root, solution), cache)
    (tmp_path / "solution.json").write_text(json.dumps(solution.to_dict()))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    finished = subprocess.run([sys.executable, "-c", GPU_CONSUMER, str(tmp_path / "solution.json"),
                               str(problem.root), str(cache), str(tmp_path / "sources")],
                              env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert json.loads(finished.stdout.strip().splitlines()[-1]) == [kept, launchers], \
        "the worker compiled a kernel or a launcher the ahead cache should have held"


# A hostile candidate: at import it plants, in the Triton cache its capture compiles into, a
# link to a file of the driver's and a named pipe, hoping the driver copies what they lead to.
PLANTING_SOURCE = ADD_SOURCE.replace("import triton\n", '''import os
import triton

_cache = triton.knobs.cache.dir
os.makedirs(os.path.join(_cache, "PLANTED"), exist_ok=True)
os.symlink({secret!r}, os.path.join(_cache, "PLANTED", "kernel.json"))
os.symlink({folder!r}, os.path.join(_cache, "LINKED"))
os.mkfifo(os.path.join(_cache, "PLANTED", "pipe"))
''', 1)


def test_what_a_candidate_plants_in_its_cache_is_never_followed(tmp_path):
    """The driver keeps regular files only: a link (to a file or a folder of the driver's) or
    a pipe the candidate's capture left in its cache is not copied, nor what it leads to."""
    secret = tmp_path / "driver" / "key"
    secret.parent.mkdir()
    secret.write_text("the driver's")
    problem = load_problem(write_problem(tmp_path / "add", ADD, [{"axes": {"n": 8192}}]))
    source = PLANTING_SOURCE.format(secret=str(secret), folder=str(secret.parent))
    solution = replace(solution_from_python(source, "add"), destination_passing_style=True)
    root = tmp_path / "ahead"
    assert compile_ahead(solution, problem, problem.workloads,
                         lambda cache: jit_ahead.keep(cache, root, solution)) == 1
    kept = jit_ahead.folder(root, solution)
    assert len(_kernels(kept)) == 1  # the honest part is kept
    assert not (kept / "PLANTED").exists() and not (kept / "LINKED").exists()
    assert all(not p.is_symlink() for p in kept.rglob("*"))
    assert all("the driver's" not in p.read_text(errors="ignore")
               for p in kept.rglob("*") if p.is_file())
