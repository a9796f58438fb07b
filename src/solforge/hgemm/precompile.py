"""Compile the Triton kernels a tuning pass will launch before it launches them, many at once,
and read what the compiler made of them.

A tuning pass over the ~1,100 shapes launches 193 distinct sets of Triton kernels (one per
setting, dtype, B layout and integer specialisation: Triton specialises sizes equal to 1 or
divisible by 16), each compiled at its first launch, one after another, on the device machine's
time. Here they are compiled ahead in parallel processes (59 compile-seconds in all on a 2-core
machine without a GPU) for GPUTarget("cuda", 90, 32) with the
forge's capture (forge/capture.py: each launch specialised exactly as Triton's JIT would
specialise it, then triton.compile), which fills Triton's on-disk cache under the key the JIT
computes at launch from the same source, signature, constants and options (not yet seen on the
GPU: if a key differed, that kernel would just compile at its first launch, as without this).
No GPU is needed: the launchers run on CPU tensors that are allocated and never touched. The
same path, with SASS, lets a machine without a GPU check that every variant compiles for sm_90a
and uses the instructions it is meant to (the tests do).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.hgemm.kernels import VARIANTS
from solforge.hgemm.space import Config, Shape, shortlist

TARGET = "sm_90a"
# SASS instructions that tell the paths apart: wgmma, mma.sync, TMA loads and
# stores, cp.async, CUDA-core FMAs, 16-byte global loads.
INSTRUCTIONS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "LDGSTS", "FFMA", "LDG.E.128")
ENTRY_SOURCE = '''import triton  # noqa: F401  (a Triton solution)

from solforge.hgemm.kernels import launch
from solforge.hgemm.space import Config

CONFIG = Config.from_json({config})


def run(a, b, out):
    launch(CONFIG, a, b, out)
'''


@dataclass(frozen=True)
class CompileJob:
    config: Config
    shape: Shape


@dataclass(frozen=True)
class CompileResult:
    job: CompileJob
    kernels: tuple[str, ...]  # kernel names compiled
    instructions: dict[str, int]  # SASS instruction counts (empty without SASS)
    seconds: float
    failure: str | None = None


def _size_class(value: int) -> int:
    """How Triton specialises an integer argument: 1, divisible by 16, or neither."""
    if value == 1:
        return 1
    return 16 if value % 16 == 0 else 0


def _specialisation(config: Config, shape: Shape) -> tuple:
    block_k = config.as_dict().get("BLOCK_K", 1)
    return (config, shape.dtype, shape.layout, _size_class(shape.m), _size_class(shape.n),
            _size_class(shape.k), shape.k % block_k == 0)


def jobs_for(shapes: Iterable[Shape], sm_count: int, limit: int = 10) -> list[CompileJob]:
    """One job per distinct compiled kernel set of the shapes' shortlists (Triton variants),
    `limit` candidates a shape (the most the tuner tries)."""
    jobs = {}
    for shape in shapes:
        for config in shortlist(shape, sm_count, limit=limit):
            if VARIANTS[config.kernel].needs_cuda:
                continue
            jobs.setdefault(_specialisation(config, shape), CompileJob(config, shape))
    return list(jobs.values())


def _operands(shape: Shape) -> list[torch.Tensor]:
    """CPU tensors of the shape's sizes and layout (allocated, never touched)."""
    dtype = shape.torch_dtype
    a = torch.empty((shape.m, shape.k), dtype=dtype)
    if shape.layout == "nn":
        b = torch.empty((shape.k, shape.n), dtype=dtype)
    else:
        b = torch.empty((shape.n, shape.k), dtype=dtype).T
    return [a, b, torch.empty((shape.m, shape.n), dtype=dtype)]


def compile_job(job: CompileJob, target: str = TARGET, sass: bool = False) -> CompileResult:
    """Compile one job's launches in this process (Triton must not be in interpreter mode)."""
    from solforge.data.solution import Solution, SourceFile
    from solforge.forge.capture import DescriptorError, capture_kernels

    source = ENTRY_SOURCE.format(config=json.dumps(job.config.to_json()))
    solution = Solution(name=f"hgemm-{job.config.kernel}", definition="hgemm", author="solforge",
                        languages=("triton",), entry_file="kernel.py", entry_function="run",
                        destination_passing_style=True,
                        sources=(SourceFile("kernel.py", source),))
    began = time.perf_counter()
    try:
        compiled = capture_kernels(solution, _operands(job.shape), target, sass=sass)
    except DescriptorError as exc:
        return CompileResult(job, (), {}, time.perf_counter() - began, str(exc)[:2000])
    counts: Counter[str] = Counter()
    for kernel in compiled:
        for name in INSTRUCTIONS:
            counts[name] += len(re.findall(rf"\b{re.escape(name)}\b", kernel.sass or ""))
    return CompileResult(job, tuple(k.name for k in compiled), dict(counts),
                         time.perf_counter() - began)


def precompile(jobs: Sequence[CompileJob], workers: int | None = None, target: str = TARGET,
               sass: bool = False) -> list[CompileResult]:
    """Compile every job in `workers` fresh processes (spawned, Triton out of interpreter mode)."""
    if not jobs:
        return []
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    context = multiprocessing.get_context("spawn")
    previous = os.environ.pop("TRITON_INTERPRET", None)  # the children inherit the environment
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            return list(pool.map(compile_job, jobs, [target] * len(jobs), [sass] * len(jobs)))
    finally:
        if previous is not None:
            os.environ["TRITON_INTERPRET"] = previous


def _main(argv: list[str]) -> None:
    """python -m solforge.hgemm.precompile JOBS.json RESULTS.json [--sass]: compile the jobs
    (each {"config": ..., "shape": ...}) and write their results (the tests' entry point)."""
    jobs = [CompileJob(Config.from_json(j["config"]), Shape.from_json(j["shape"]))
            for j in json.loads(Path(argv[0]).read_text())]
    results = precompile(jobs, sass="--sass" in argv)
    Path(argv[1]).write_text(json.dumps([
        {"config": r.job.config.to_json(), "shape": r.job.shape.to_json(),
         "kernels": list(r.kernels), "instructions": r.instructions, "seconds": r.seconds,
         "failure": r.failure} for r in results]))


if __name__ == "__main__":
    _main(sys.argv[1:])
