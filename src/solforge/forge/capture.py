"""Compile a candidate's Triton kernels for a GPU without running them: the code the
descriptors (descriptors.py) are read from.

Capture: the solution's entry point is called once on real inputs (on the CPU by default) with
Triton's launch replaced by a compile. Each `kernel[grid](...)` is specialised exactly as Triton
would specialise it for those arguments (dtypes, 16-byte alignment of pointers, integers divisible
by 16 or equal to 1, constexprs, num_warps / num_stages), compiled for the target, and recorded
with its grid; nothing runs on a GPU. An autotuned kernel compiles one of its configs (the first
unless asked otherwise: the autotuner's choice is only made by timing on the GPU); its record
says how many configs it had. Heuristics run as usual. The entry point's own torch ops run on the
inputs' device, so a solution that picks its launch by device (some take CPU-only tiles for
Triton's interpreter) is described on the path it takes there: on a GPU machine pass "cuda".

`describe_solution` and `capture_solutions` capture in a fresh Python process: the candidate's
code never runs in the caller's process, and Triton there is never in interpreter mode (a process
that imported Triton with TRITON_INTERPRET=1, as the CPU tests do, cannot compile kernels).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction, create_function_from_signature

from solforge.data.dtypes import storage_shape
from solforge.data.solution import Solution, parse_solution
from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.harness.process import describe_exit, python_env, run_module_sandboxed
from solforge.problem.inputs import make_inputs
from solforge.problem.problem import Problem, load_problem, tensor_shape

_CAPTURE_LOCK = threading.Lock()  # the capture patches Triton's classes for the whole process
_MODULE_NAME = "solforge_described_candidate"  # one at a time (the lock), dropped after each


class DescriptorError(SolforgeError):
    """A solution whose kernels could not be captured, compiled or described."""


@dataclass(frozen=True)
class Launch:
    """How a kernel was launched: its grid, launch options and the integer arguments it got."""

    grid: tuple[int, int, int]
    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    int_arguments: tuple[tuple[str, int], ...] = ()  # resolves loop steps passed at run time

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


@dataclass(frozen=True)
class CompiledKernel:
    """One captured launch and the code Triton compiled for it."""

    name: str
    launch: Launch
    ptx: str
    ttgir: str
    cubin: bytes
    sass: str | None  # None when disassembly was skipped
    shared_bytes: int  # dynamic shared memory per program (Triton's metadata)
    registers: int | None  # per thread, from `cuobjdump -res-usage`; None without SASS
    autotune_configs: int  # configs its autotuner held; 1 when not autotuned
    compile_seconds: float  # milliseconds when Triton's on-disk cache already held it


# -- capturing in a fresh process ----------------------------------------------------------------


@dataclass(frozen=True)
class CaptureJob:
    """A solution and the workload whose inputs its entry point is called on."""

    solution: Solution
    problem: Problem
    workload: Workload
    autotune_config: int = 0  # which config of each autotuned kernel (see capture_kernels)
    device: str | None = None  # where its inputs are made (None: the call's `device`)
    describe: bool = True  # False: compiled for Triton's cache only, no kernels come back
    every_config: bool = False  # every config of each autotuned kernel, not `autotune_config`


CaptureOutcome = tuple[CompiledKernel, ...] | DescriptorError  # a job's kernels or its error


def capture_solutions(jobs: Sequence[CaptureJob], target: str = "sm_90a", device: str = "cpu",
                      sass: bool = True, timeout_s: float = 600.0,
                      keep_triton: Callable[[Path], Any] | None = None) -> list[CaptureOutcome]:
    """Capture each job's kernels (see capture_kernels) in one fresh Python process.
    `keep_triton` is given the process's Triton cache folder (every job's compiled kernels)
    after it succeeded, before the folder is removed (see harness/sandbox/jit_ahead.py).

    The candidates' code never runs in the caller: it runs in a sandbox like a worker's (a
    private uid, writes only to its own folder and the result's, no ptrace, no baseline key's
    path in its environment; harness/process.py), since importing a candidate runs whatever it
    holds, and the caller's files (the store, the baseline key, solforge's own source) must
    stay out of its reach. Triton in that process is
    never in interpreter mode: a process that imported Triton with TRITON_INTERPRET=1 holds
    interpreter-only library functions (tl.sum, tl.cdiv) and cannot compile a kernel. Each job
    gets its kernels or its error; a process that dies or runs past the limit fails them all.
    The result is the candidate's process's word: it places the candidate in the archive and
    never decides its verdict."""
    _gpu_target(target)  # a bad target fails here, not in the child
    if not jobs:
        return []
    with tempfile.TemporaryDirectory(prefix="solforge-describe-") as name:
        folder, output = Path(name), Path(name) / "result"
        folder.chmod(0o755)  # the request holds the candidates' own sources: the sandbox reads it
        output.mkdir()
        request, result = folder / "request.json", output / "result.json"
        request.write_text(json.dumps({
            "target": target, "device": device, "sass": sass,
            "triton_cache": str(output / "triton") if keep_triton else None,
            "jobs": [_job_to_json(job) for job in jobs]}))
        request.chmod(0o644)
        env = {key: value for key, value in python_env(dict(os.environ)).items()
               if key != "TRITON_INTERPRET"}
        problems = [Path(job.problem.root) for job in jobs]
        finished = run_module_sandboxed("solforge.forge.capture", [str(request), str(result)],
                                        timeout_s, env, folder, output, readable=problems,
                                        device_type="cuda" if device == "cuda" else "cpu")
        if finished.returncode != 0 or not result.is_file():
            reason = (f"ran past {timeout_s:g} s" if finished.timed_out
                      else describe_exit(finished.returncode))
            failure = DescriptorError(f"the capture process {reason}:\n{finished.log[-3000:]}")
            return [failure for _ in jobs]
        outcomes = json.loads(result.read_text())["results"]
        if keep_triton is not None:
            keep_triton(output / "triton")
    return [_outcome_from_json(outcome) for outcome in outcomes]


def compile_ahead(solution: Solution, problem: Problem, workloads: Sequence[Workload],
                  keep_triton: Callable[[Path], Any], target: str = "sm_90a",
                  timeout_s: float = 600.0, every_config: bool = False) -> int:
    """Compile the solution's Triton kernels for every workload, on meta tensors (their
    shapes, strides and 16-byte alignment; no data, no GPU work) in one sandboxed process, and
    hand its Triton cache to `keep_triton`: the kernels the candidate's worker will ask for
    (harness/sandbox/jit_ahead.py). `every_config` compiles each autotuned kernel in every one
    of its configs, as the worker's autotuner will before it times them (else only the first).
    The number of workloads whose call compiled; a workload whose call fails on meta tensors
    is only left out (its kernels compile in the worker)."""
    if "triton" not in solution.languages or not workloads:
        return 0
    jobs = [CaptureJob(solution, problem, workload, device="meta", describe=False,
                       every_config=every_config)
            for workload in workloads]
    outcomes = capture_solutions(jobs, target, "meta", sass=False, timeout_s=timeout_s,
                                 keep_triton=keep_triton)
    return sum(not isinstance(outcome, DescriptorError) for outcome in outcomes)


def _job_to_json(job: CaptureJob) -> dict[str, Any]:
    return {"solution": job.solution.to_dict(), "problem": str(Path(job.problem.root).resolve()),
            "workload": job.workload.uuid, "autotune_config": job.autotune_config,
            "device": job.device, "describe": job.describe, "every_config": job.every_config}


def _outcome_from_json(outcome: dict[str, Any]) -> CaptureOutcome:
    if "error" in outcome:
        return DescriptorError(outcome["error"])
    return tuple(_kernel_from_json(record) for record in outcome["kernels"])


def _kernel_to_json(kernel: CompiledKernel) -> dict[str, Any]:
    record = dataclasses.asdict(kernel)
    record["cubin"] = base64.b64encode(kernel.cubin).decode("ascii")
    return record


def _kernel_from_json(record: dict[str, Any]) -> CompiledKernel:
    launch = record["launch"]
    return CompiledKernel(**{
        **record,
        "cubin": base64.b64decode(record["cubin"]),
        "launch": Launch(grid=tuple(launch["grid"]), num_warps=launch["num_warps"],
                         num_stages=launch["num_stages"], num_ctas=launch["num_ctas"],
                         int_arguments=tuple((name, value)
                                             for name, value in launch["int_arguments"]))})


def _capture_main(request_path: str, result_path: str) -> None:
    """The child: capture every job, then disassemble all their kernels at once."""
    request = json.loads(Path(request_path).read_text())
    if request.get("triton_cache"):
        triton.knobs.cache.dir = request["triton_cache"]
    outcomes = [_capture_job(job, request) for job in request["jobs"]]
    captured = [kernel for outcome in outcomes if isinstance(outcome, tuple) for kernel in outcome]
    disassembled = iter(with_sass(captured) if request["sass"] else captured)
    results = []
    for outcome in outcomes:
        if isinstance(outcome, DescriptorError):
            results.append({"error": str(outcome)})
        else:
            results.append({"kernels": [_kernel_to_json(next(disassembled)) for _ in outcome]})
    Path(result_path).write_text(json.dumps({"results": results}))


def _capture_job(job: dict[str, Any], request: dict[str, Any]) -> CaptureOutcome:
    """One job in the child; any failure (the candidate's included) is that job's error."""
    try:
        solution = parse_solution(job["solution"])
        problem = load_problem(job["problem"])
        arguments = workload_arguments(solution, problem, problem.workload(job["workload"]),
                                       job.get("device") or request["device"])
        launchers = bool(request.get("triton_cache"))
        kernels = capture_kernels(solution, arguments, request["target"],
                                  job["autotune_config"], sass=False, launchers=launchers)
        if job.get("every_config"):
            configs = max(kernel.autotune_configs for kernel in kernels)
            for config in range(1, configs):  # the worker's autotuner compiles each
                capture_kernels(solution, arguments, request["target"], config, sass=False,
                                launchers=launchers)
        return kernels if job.get("describe", True) else ()
    except SolforgeError as exc:
        return DescriptorError(str(exc))
    except Exception as exc:
        return DescriptorError(f"{type(exc).__name__}: {exc}")


# -- capturing in this process -------------------------------------------------------------------


def workload_arguments(solution: Solution, problem: Problem, workload: Workload,
                       device: str = "cpu") -> list[Any]:
    """The entry point's arguments as the harness passes them: the inputs, then (destination
    passing style) one empty tensor per output."""
    arguments = list(make_inputs(problem, workload, device).values())
    if solution.destination_passing_style:
        axes = problem.axes(workload)
        for spec in problem.definition.outputs.values():
            shape = storage_shape(tensor_shape(spec, axes) or (), spec.dtype)
            arguments.append(torch.empty(shape, dtype=spec.dtype.torch_dtype, device=device))
    return arguments


def capture_kernels(solution: Solution, arguments: Sequence[Any], target: str = "sm_90a",
                    autotune_config: int = 0, sass: bool = True,
                    launchers: bool = False) -> tuple[CompiledKernel, ...]:
    """Call the entry point once on `arguments` in this process, compiling each Triton launch
    for `target` instead of running it. `autotune_config` picks the config of every autotuned
    kernel (its last one where it has fewer; pruning hooks are not applied); `sass=False`
    skips disassembly (about 0.7 s a kernel); `launchers` also builds each kernel's launcher
    into Triton's cache (see build_launcher). Needs Triton out of interpreter mode."""
    if "triton" not in solution.languages:
        raise DescriptorError(f"{solution.name}: only Triton solutions can be described "
                              f"(languages: {', '.join(solution.languages)})")
    if triton.knobs.runtime.interpret or not isinstance(tl.standard.cdiv, JITFunction):
        raise DescriptorError("Triton is in interpreter mode in this process (TRITON_INTERPRET"
                              "=1), where kernels cannot be compiled: use capture_solutions")
    capture = _Capture(_gpu_target(target), autotune_config, launchers)
    with _CAPTURE_LOCK, capture.installed(), _loaded_entry_point(solution) as entry_point:
        try:
            entry_point(*arguments)
        except DescriptorError:
            raise
        except Exception as exc:
            raise DescriptorError(f"{solution.name}: the entry point raised "
                                  f"{type(exc).__name__}: {exc}") from None
    if not capture.kernels:
        raise DescriptorError(f"{solution.name}: the entry point launched no Triton kernel")
    return with_sass(capture.kernels) if sass else tuple(capture.kernels)


def with_sass(kernels: Sequence[CompiledKernel], workers: int = 4) -> tuple[CompiledKernel, ...]:
    """The kernels with their SASS and registers per thread, disassembled by the cuobjdump that
    ships with Triton. About 0.7 s a kernel, mostly spent waiting, so several run at once; a
    cubin shared by several launches is disassembled once."""
    cubins = list(dict.fromkeys(kernel.cubin for kernel in kernels))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        disassembled = dict(zip(cubins, pool.map(_disassemble, cubins)))
    return tuple(dataclasses.replace(kernel, sass=disassembled[kernel.cubin][0],
                                     registers=disassembled[kernel.cubin][1])
                 for kernel in kernels)


def _gpu_target(target: str) -> GPUTarget:
    match = re.fullmatch(r"sm_(\d+)a?", target)
    if match is None:
        raise DescriptorError(f"target {target!r}: expected an architecture like 'sm_90a'")
    return GPUTarget("cuda", int(match.group(1)), 32)


@contextmanager
def _loaded_entry_point(solution: Solution) -> Iterator[Callable[..., Any]]:
    """The entry function, imported from the sources written to a temporary folder (Triton
    reads kernels back from files) under a private module name. Its modules are dropped after,
    so the next solution's `kernel.py` is imported afresh; library modules it imported stay (Triton
    keeps references to some, such as the TensorDescriptor class)."""
    with tempfile.TemporaryDirectory(prefix="solforge-candidate-") as folder:
        solution.write_sources(Path(folder))
        sys.path.insert(0, folder)
        try:
            yield _import_entry_function(solution, Path(folder))
        finally:
            sys.path.remove(folder)
            for name in [name for name, module in sys.modules.items()
                         if name == _MODULE_NAME or _is_within(module, folder)]:
                del sys.modules[name]


def _is_within(module: Any, folder: str) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and Path(file).is_relative_to(folder)


def _import_entry_function(solution: Solution, folder: Path) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, folder / solution.entry_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise DescriptorError(f"{solution.name}: importing {solution.entry_file} failed: "
                              f"{type(exc).__name__}: {exc}") from None
    function = getattr(module, solution.entry_function, None)
    if not callable(function):
        raise DescriptorError(f"{solution.name}: {solution.entry_file} defines no callable "
                              f"{solution.entry_function!r}")
    return function


class _Capture:
    """Stands in for Triton's launch path while the entry point runs."""

    def __init__(self, target: GPUTarget, autotune_config: int, launchers: bool = False) -> None:
        self.target = target
        self.backend = make_backend(target)
        self.autotune_config = autotune_config
        self.launchers = launchers
        self.kernels: list[CompiledKernel] = []
        self.compiled: dict[str, tuple[Any, float]] = {}
        self.configs_of_current_tuner = 1

    @contextmanager
    def installed(self) -> Iterator[None]:
        launch, tune = JITFunction.run, Autotuner.run
        capture = self

        def compile_instead(fn, *args, grid, warmup, **kwargs):
            return capture.compile_launch(fn, args, kwargs, grid, warmup)

        def one_config(tuner, *args, **kwargs):
            return capture.run_one_config(tuner, args, kwargs)

        JITFunction.run, Autotuner.run = compile_instead, one_config
        try:
            yield
        finally:
            JITFunction.run, Autotuner.run = launch, tune

    def run_one_config(self, tuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
        config = tuner.configs[min(self.autotune_config, len(tuner.configs) - 1)]
        self.configs_of_current_tuner = len(tuner.configs)
        try:
            return tuner.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.configs_of_current_tuner = 1

    def compile_launch(self, fn: JITFunction, args: tuple, kwargs: dict[str, Any], grid: Any,
                       warmup: bool) -> Any:
        """Specialise as JITFunction.run does, compile for the target, record the launch."""
        binder = create_function_from_signature(fn.signature, fn.params, self.backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(self.backend, kwargs, bound,
                                                              specialization, options)
        key = repr((fn.fn.__qualname__, signature, constexprs, attrs, options))
        if key not in self.compiled:
            began = time.perf_counter()
            try:
                kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                                        target=self.target, options=options.__dict__)
            except Exception as exc:
                raise DescriptorError(f"compiling {fn.fn.__name__} for sm_{self.target.arch} "
                                      f"failed: {exc}") from None
            self.compiled[key] = (kernel, time.perf_counter() - began)
            if self.launchers:
                build_launcher(kernel)
        kernel, seconds = self.compiled[key]
        if not warmup:
            grid = grid(bound) if callable(grid) else grid
            self.kernels.append(self._record(kernel, _launch(kernel, grid, bound), seconds))
        return kernel

    def _record(self, kernel: Any, launch: Launch, seconds: float) -> CompiledKernel:
        return CompiledKernel(
            name=kernel.metadata.name, launch=launch, ptx=kernel.asm["ptx"],
            ttgir=kernel.asm["ttgir"], cubin=kernel.asm["cubin"], sass=None,
            shared_bytes=kernel.metadata.shared, registers=None,
            autotune_configs=self.configs_of_current_tuner, compile_seconds=seconds)


def build_launcher(kernel: Any) -> bool:
    """Build the compiled kernel's launcher into Triton's cache; False where it cannot be built
    here (no CUDA driver library, as on a CPU machine: the worker then builds it).

    On a kernel's first run Triton compiles a small C launcher for its signature with the host's
    C compiler (0.14-0.24 s on the 2-core CPU machine) and caches it by the hash of its source.
    Built here, beside the kernels, it is kept with them (harness/sandbox/jit_ahead.py) and the
    worker's first call loads it instead of compiling it, off the GPU's critical path."""
    from triton.backends.nvidia.driver import CudaLauncher

    try:
        CudaLauncher(kernel.src, kernel.metadata)
    except Exception:  # a missing libcuda is an AssertionError; a failed build, anything
        return False
    return True


def _launch(kernel: Any, grid: Sequence[int], bound: dict[str, Any]) -> Launch:
    dims = (*(int(size) for size in grid), 1, 1)[:3]
    integers = tuple((name, value) for name, value in bound.items()
                     if isinstance(value, int) and not isinstance(value, bool))
    metadata = kernel.metadata
    return Launch(grid=dims, num_warps=metadata.num_warps, num_stages=metadata.num_stages,
                  num_ctas=metadata.num_ctas, int_arguments=integers)


def _disassemble(cubin: bytes) -> tuple[str, int | None]:
    """SASS, and the registers per thread from the resource usage cuobjdump prints with it."""
    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory(prefix="solforge-sass-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            done = subprocess.run([tool, "-sass", "-res-usage", str(path)], capture_output=True,
                                  text=True, timeout=120, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise DescriptorError(f"cuobjdump failed: {exc}") from None
    registers = re.search(r"\bREG:(\d+)", done.stdout)
    return done.stdout, int(registers.group(1)) if registers else None


if __name__ == "__main__":
    _capture_main(sys.argv[1], sys.argv[2])
