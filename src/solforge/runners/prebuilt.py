"""The compile step as a task of its own: build a C++/CUDA solution on a CPU worker and carry
the built extension to the GPU worker that evaluates it (KernelFoundry's split between compiler
and GPU workers).

The harness builds a solution into `<cache>/builds/<name>-<hash of its sources>/` and skips the
compile when that folder already holds the library (harness/build.py). So the compile task runs
`build_solution` where it is, sends back the bytes of the library and of every shared object
built beside it (a TVM-FFI solution's library is a loader module that opens its `.so`), and the
GPU worker writes them to the same place in its own cache before `evaluate`, which finds the
build done: no GPU is held while a compiler runs. A compile that fails never reaches a GPU:
its status and the compiler's message come back instead and become the unit's traces.

A torch.compile baseline's unit has a compile step too: its graphs compiled ahead
(harness/compile_ahead.py) into the harness cache of this machine, where its evaluation finds
them (the local runner's units share that cache).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.data.solution import SolutionError, parse_solution
from solforge.data.trace import Status
from solforge.harness import protocol
from solforge.harness.build import BuildFailure, build_solution
from solforge.harness.evaluate import EvalConfig, EvaluationRun, default_cache_dir
from solforge.problem.suite import open_problem
from solforge.runners.base import EvalTask

BUILDS = "builds"  # the folder of the harness cache that holds builds (EvaluationRun.candidate)


@dataclass(frozen=True)
class Prebuilt:
    folder: str  # the build folder's name under <cache>/builds
    library: str  # the extension's path inside that folder
    content: bytes
    seconds: float  # the compile (0 when the compile task found it built)
    beside: tuple[tuple[str, bytes], ...] = ()  # other built files the library loads (path, bytes)


@dataclass(frozen=True)
class BuildRefused:
    status: Status  # COMPILE_ERROR, TIMEOUT, or RUNTIME_ERROR (cannot run on this device)
    message: str
    seconds: float


def needs_compile_ahead(task: EvalTask) -> bool:
    """A torch.compile baseline whose configuration compiles ahead: its graphs can be compiled
    on the CPU cores while its unit waits for a slot (harness/compile_ahead.py)."""
    return task.baseline == protocol.REFERENCE_COMPILE and task.config.compile_ahead


def compile_ahead_unit(task: EvalTask) -> Path | None:
    """Compile the unit's torch.compile baseline ahead, here, into the harness cache where its
    evaluation looks (nothing when its times are stored or its configuration says no)."""
    run = EvaluationRun(open_problem(task.problem), task.config)
    if task.config.reuse_baselines and run.stored_reference_traces(task.baseline) is not None:
        return None
    return run.prepare_compile_ahead()


def needs_build(task: EvalTask) -> bool:
    """A C++/CUDA solution; a malformed one is left to the unit, which reports why."""
    if task.solution is None:
        return False
    try:
        return parse_solution(task.solution).is_cpp
    except SolutionError:
        return False


def build_unit(task: EvalTask) -> Prebuilt | BuildRefused:
    """Build the unit's solution here, as the harness would before evaluating it."""
    start = time.perf_counter()
    solution = parse_solution(task.solution)
    device_type = torch.device(task.config.device).type
    try:
        build = build_solution(solution, _builds(task.config), device_type,
                               task.config.compile_timeout_s)
    except BuildFailure as failure:
        return BuildRefused(failure.status, failure.message, time.perf_counter() - start)
    library = build.library.relative_to(build.folder).as_posix()
    return Prebuilt(build.folder.name, library, build.library.read_bytes(), build.seconds,
                    beside_library(build.folder, build.library))


def beside_library(folder: Path, library: Path) -> tuple[tuple[str, bytes], ...]:
    """The shared objects built in `folder/build` other than the library itself."""
    objects = sorted((folder / "build").glob("*.so")) if (folder / "build").is_dir() else []
    return tuple((path.relative_to(folder).as_posix(), path.read_bytes())
                 for path in objects if path != library)


def install(prebuilt: Prebuilt, config: EvalConfig) -> Path:
    """Put the library (and what it loads) where `evaluate` looks for it; nothing to do where
    it was built. The library goes last: a build counts as done once it is there."""
    folder = _builds(config) / prebuilt.folder
    for path, content in prebuilt.beside:
        _write(folder / path, content)
    return _write(folder / prebuilt.library, prebuilt.content)


def _write(target: Path, content: bytes) -> Path:
    if target.is_file() and target.read_bytes() == content:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(content)
    partial.replace(target)  # another unit loading the file never sees half of it
    return target


def _builds(config: EvalConfig) -> Path:
    return (config.cache_dir or default_cache_dir()) / BUILDS
