"""The torch.compile baseline's graphs compiled ahead, in parallel processes, and found by its
worker as cache hits.

Timing the reference under torch.compile starts with one compile per workload shape
(`dynamic=False`): Dynamo traces, Inductor lowers and generates code, its kernels are built
(Triton on a GPU, C++ on the CPU). Seconds per shape, one shape after another, in the one worker
that then times them: in the H200 suite's cold sample (2026-12-02) the compile baseline's first
rounds were 30 of its 99 s. None of it needs the GPU's time (a context and the inputs' memory,
no kernel). So, while the eager baseline is being timed,
a few trusted processes (the problem's own reference, which the driver runs anyway; no candidate
code) each compile a share of the workloads into one cache folder. The compile baseline's worker
gets a copy of it in its sandbox's Inductor and Triton caches, and then only traces: Inductor's
AOTAutograd and FX-graph caches answer the rest (keyed by the graph, its inputs' metadata and the
configuration, not by paths or by the process).

Nothing here does device work, so a timing running meanwhile is not disturbed:
- the inputs are `torch.empty` tensors of each workload's shapes, dtypes and strides (allocated,
  never written or read);
- the compile goes through a backend that runs `torch.compile`'s own default backend (Inductor)
  and then raises, so the compiled graph never runs;
- `fullgraph=True`: a reference that does not trace into one graph raises while it is traced,
  before anything runs eagerly (its worker compiles it, as before);
- Inductor's one benchmark at compile time in its default mode, the padding pass timing a
  matmul padded and unpadded on the device (`pad_mm`, for a matmul with a dimension off its
  alignment), is made to raise: such a graph is left to its worker, which times the padding
  itself as torch.compile does (what the caches hold is never a decision taken otherwise);
- only workloads of random tensors and scalars are compiled: custom inputs' values may decide the
  graph, and a safetensors file would have to be read; and only those whose inputs take at most
  MAX_INPUT_BYTES, so that the memory they hold meanwhile cannot starve a timed worker.
A workload not compiled ahead is compiled by the worker as before: this only moves time.

Two ways in: `start_compile_ahead` while the evaluation itself times the eager baseline, or
`prepare` from the local runner's compile pool while the baseline's unit waits for a slot (then
its evaluation finds the folder by `prepared`, keyed by the definition, the workloads and the
device, and starts nothing).

    python -m solforge.harness.compile_ahead PROBLEM.json DEVICE RESULT.json
        (one child: compiles the workloads PROBLEM.json lists into $TORCHINDUCTOR_CACHE_DIR and
        $TRITON_CACHE_DIR)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.data.definition import parse_definition
from solforge.data.workload import Workload, parse_workload
from solforge.harness.process import kill_group, python_command, start
from solforge.problem.inputs import make_inputs
from solforge.problem.problem import Problem
from solforge.problem.reference import load_reference_module

FOLDER = "compile-ahead"  # under the harness cache folder (EvalConfig.cache_dir)
MAX_PROCESSES = 8
MAX_INPUT_BYTES = 2 * 2**30  # one workload's inputs, held on the device while it is compiled
WAIT_S = 600.0  # the most the compile baseline waits for them; then its worker compiles


_RUNNING: set[subprocess.Popen] = set()  # every child started here and not yet waited for
_LOCK = threading.Lock()


def stop_all() -> None:
    """Kill every child still compiling (a runner stopping: its waits then return at once)."""
    with _LOCK:
        running = list(_RUNNING)
    for process in running:
        kill_group(process)


class Compiled(Exception):
    """Raised by the backend once Inductor has compiled (and cached) a graph."""


class WouldRunOnDevice(Exception):
    """Inductor was about to run something on the device while compiling."""


def refuse_device_benchmarks(device: torch.device) -> str | None:
    """Make Inductor's padding pass raise where it would decide by timing on the device (its
    `_should_pad`, reached only for a matmul that padding could change); why nothing can be
    compiled ahead here instead, when this PyTorch's pass is not the one known."""
    if device.type != "cuda":
        return None  # the pass pads CUDA matmuls only
    from torch._inductor.fx_passes import pad_mm

    if not callable(getattr(pad_mm, "_should_pad", None)):
        return "not compiled ahead: this PyTorch's matmul padding pass is not the one known"

    def refuse(*args: object, **kwargs: object) -> bool:
        raise WouldRunOnDevice("Inductor would time a matmul's padding on the device")

    pad_mm._should_pad = refuse
    return None


def compile_only(graph: torch.fx.GraphModule, example_inputs: list) -> None:
    """torch.compile's default backend, then a stop: the graph is in the caches, never run."""
    torch._dynamo.lookup_backend("inductor")(graph, example_inputs)
    raise Compiled


def compilable(problem: Problem, workloads: list[Workload]) -> list[Workload]:
    """The workloads whose inputs are known without running or reading anything, and small
    enough to hold."""
    return [w for w in workloads
            if all(source.kind in ("random", "scalar") for source in w.inputs.values())
            and input_bytes(problem, w) <= MAX_INPUT_BYTES]


def input_bytes(problem: Problem, workload: Workload) -> int:
    return sum(v.numel() * v.element_size() for v in make_inputs(problem, workload, "meta")
               .values() if isinstance(v, torch.Tensor))


def empty_inputs(problem: Problem, workload: Workload, device: torch.device) -> list:
    """The workload's inputs as the worker passes them (shapes, dtypes, strides, scalars) with
    no data: allocated, never written, so nothing runs on the device."""
    return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device)
            if isinstance(v, torch.Tensor) else v
            for v in make_inputs(problem, workload, "meta").values()]


def compile_workloads(problem: Problem, workloads: list[Workload],
                      device: torch.device) -> dict[str, str]:
    """Compile the reference for each workload into this process's caches, as the compile
    baseline's worker compiles it; per workload uuid, "compiled" or why not (a line)."""
    refused = refuse_device_benchmarks(device)
    if refused is not None:
        return dict.fromkeys((w.uuid for w in workloads), refused)
    run = load_reference_module(problem.definition).run
    outcome = {}
    for workload in workloads:
        torch._dynamo.reset()
        inputs = empty_inputs(problem, workload, device)
        try:
            torch.compile(run, dynamic=False, fullgraph=True, backend=compile_only)(*inputs)
            outcome[workload.uuid] = "ran: the backend did not stop it"
        except Exception as exc:
            outcome[workload.uuid] = "compiled" if _stopped(exc) else _first_line(exc)
        del inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the next workload's inputs, or another process's
    return outcome


def _first_line(exc: BaseException) -> str:
    """The innermost cause of the exception chain, on one line."""
    seen = 0
    while (exc.__cause__ or getattr(exc, "inner_exception", None)) is not None and seen < 8:
        exc, seen = exc.__cause__ or exc.inner_exception, seen + 1
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def _stopped(exc: BaseException) -> bool:
    """Whether the exception is (or wraps) the backend's stop."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, Compiled):
            return True
        exc, seen = exc.__cause__ or getattr(exc, "inner_exception", None), seen + 1
    return False


@dataclass
class CompileAhead:
    """Child processes compiling a problem's workloads into `folder` (inductor/, triton/), or
    (no children) a folder `prepare` finished."""

    folder: Path
    children: list[tuple[subprocess.Popen, Path]]
    workloads: int

    def wait(self, timeout_s: float = WAIT_S) -> dict[str, str]:
        """Wait for every child (killing those past `timeout_s`); per workload, its outcome."""
        deadline = time.monotonic() + timeout_s
        for process, _ in self.children:
            try:
                process.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(process)
            with _LOCK:
                _RUNNING.discard(process)
        self.children = []
        outcome: dict[str, str] = {}
        for result in sorted(self.folder.glob("result-*.json")):
            with contextlib.suppress(OSError, ValueError):
                outcome.update(json.loads(result.read_text()))
        return outcome

    def close(self) -> None:
        """Stop what still runs and remove the folder."""
        for process, _ in self.children:
            kill_group(process)
            with _LOCK:
                _RUNNING.discard(process)
        self.children = []
        shutil.rmtree(self.folder, ignore_errors=True)


def start_compile_ahead(problem: Problem, workloads: list[Workload], device: torch.device,
                        root: Path, env: dict[str, str],
                        processes: int | None = None) -> CompileAhead | None:
    """Start compiling `workloads` (those that can be) in up to `processes` children, each
    with a share; None when there is nothing to compile."""
    chosen = compilable(problem, workloads)
    if not chosen:
        return None
    count = processes or max(1, min(MAX_PROCESSES, (os.cpu_count() or 2) // 2))
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ahead-", dir=root))
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
           "TRITON_CACHE_DIR": str(folder / "triton")}
    children = []
    for index in range(min(count, len(chosen))):
        share, result = folder / f"problem-{index}.json", folder / f"result-{index}.json"
        share.write_text(json.dumps({"definition": problem.definition.to_dict(),
                                     "workloads": [w.to_dict() for w in chosen[index::count]],
                                     "root": str(problem.root)}))
        argv = python_command("solforge.harness.compile_ahead", str(share), str(device),
                              str(result))
        process = start(argv, env, folder)
        with _LOCK:
            _RUNNING.add(process)
        children.append((process, result))
    return CompileAhead(folder, children, len(chosen))


def key(problem: Problem, workloads: list[Workload], device: torch.device) -> str:
    """What a prepared folder was compiled for: the definition, the workloads, the device."""
    material = json.dumps({"definition": problem.definition.to_dict(),
                           "workloads": [w.to_dict() for w in workloads],
                           "device": device.type}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def prepare(problem: Problem, workloads: list[Workload], device: torch.device, root: Path,
            env: dict[str, str], processes: int | None = None) -> Path | None:
    """Compile ahead now and keep the folder under its key, for `prepared` to find; None when
    there was nothing to compile."""
    ahead = start_compile_ahead(problem, workloads, device, root, env, processes)
    if ahead is None:
        return None
    ahead.wait()
    final = root / key(problem, workloads, device)
    shutil.rmtree(final, ignore_errors=True)
    try:
        os.replace(ahead.folder, final)  # all of it or none: a half-made one is never found
    except OSError:
        ahead.close()
        return None
    return final


def prepared(problem: Problem, workloads: list[Workload], device: torch.device,
             root: Path) -> CompileAhead | None:
    """The folder `prepare` kept for these workloads, if any."""
    folder = root / key(problem, workloads, device)
    return CompileAhead(folder, [], len(workloads)) if folder.is_dir() else None


def main(argv: list[str]) -> int:
    share, device, result = argv
    data = json.loads(Path(share).read_text())
    definition = parse_definition(data["definition"])
    workloads = tuple(parse_workload(w, definition) for w in data["workloads"])
    problem = Problem(definition, workloads, Path(data["root"]))
    outcome = compile_workloads(problem, list(workloads), torch.device(device))
    Path(result).write_text(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
