"""The compile phase: turn a solution into something the candidate's process can import.

Python solutions only have their sources written out (Triton needs real files to read its
kernels back) and their language's package checked. C++/CUDA solutions are built with PyTorch's
C++ extension tooling (`torch.utils.cpp_extension.load`, ninja) in a separate process with its
own timeout: a compiler error is a COMPILE_ERROR carrying the compiler's message, a compile that
runs past the limit a TIMEOUT, and nothing the compiler or the candidate's static initialisers
do can touch the driver. Builds are cached by a hash of the sources and flags, so evaluating the
same solution again skips the compile.

On a machine without CUDA (PyTorch's CPU build) a CUDA source cannot be built into a loadable
extension; when nvcc is on PATH the sources are still compiled to object files (a compile-only
check, so syntax and template errors are caught), and the build then reports that the solution
cannot run here.

Run as `python -m solforge.harness.build SPEC.json` it is the compile process itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from solforge.harness.process import (
    describe_exit,
    python_env,
    run_module_sandboxed,
    run_program_sandboxed,
)
from solforge.harness.solution import CPP_SUFFIXES, Solution
from solforge.harness.trace import Status

SPEC_FILE = "build_spec.json"
COMPILE_ONLY_MARKER = "compile_only.ok"


@dataclass(frozen=True)
class Build:
    folder: Path  # the sources; the candidate's process imports from here
    library: Path | None = None  # the extension module built from C++ sources
    module_name: str | None = None
    seconds: float = 0.0
    cached: bool = False


class BuildFailure(Exception):
    def __init__(self, status: Status, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def build_solution(solution: Solution, cache_dir: Path, device_type: str,
                   timeout_s: float) -> Build:
    """Write the sources into a folder keyed by their hash and build them if C++."""
    digest = _digest(solution)
    folder = cache_dir / f"{solution_slug(solution.name)}-{digest[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    solution.write_sources(folder)
    if not solution.is_cpp:
        _check_packages(solution)
        return Build(folder)
    module_name = f"solforge_ext_{digest[:16]}"
    has_cuda_sources = any(s.path.endswith(".cu") for s in solution.sources)
    if device_type == "cpu" and has_cuda_sources:
        _compile_only(solution, folder, module_name, timeout_s)
    library = _existing_library(folder / "build", module_name)
    if library is not None:
        return Build(folder, library, module_name, cached=True)
    start = time.perf_counter()
    spec = {"name": module_name, "folder": str(folder), **solution.compile_options.to_dict(),
            "sources": [s.path for s in solution.sources if s.path.endswith(CPP_SUFFIXES)]}
    (folder / SPEC_FILE).write_text(json.dumps(spec))
    finished = run_module_sandboxed("solforge.harness.build", [str(folder / SPEC_FILE)],
                                    timeout_s, _compile_env(), folder, folder)
    seconds = time.perf_counter() - start
    if finished.timed_out:
        raise BuildFailure(Status.TIMEOUT, f"compile ran past {timeout_s:g} s\n"
                                           f"{_tail(finished.log)}")
    library = _existing_library(folder / "build", module_name)
    if finished.returncode != 0 or library is None:
        raise BuildFailure(Status.COMPILE_ERROR,
                           f"compile process {describe_exit(finished.returncode)}\n"
                           f"{_tail(finished.log)}")
    return Build(folder, library, module_name, seconds)


def solution_slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40] or "solution"


def _digest(solution: Solution) -> str:
    text = json.dumps(solution.to_dict(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_packages(solution: Solution) -> None:
    for package in solution.required_packages():
        if importlib.util.find_spec(package.split(".")[0]) is None:
            raise BuildFailure(Status.COMPILE_ERROR,
                               f"language {', '.join(solution.languages)} needs the Python "
                               f"package {package!r}, which is not installed")


def _existing_library(build_dir: Path, module_name: str) -> Path | None:
    found = sorted(build_dir.glob(f"{module_name}*.so")) if build_dir.is_dir() else []
    return found[0] if found else None


def _compile_env() -> dict[str, str]:
    env = python_env(dict(os.environ))
    nvcc = shutil.which("nvcc")
    if "CUDA_HOME" not in env and nvcc is not None:
        env["CUDA_HOME"] = str(Path(nvcc).resolve().parent.parent)
    return env


def _compile_only(solution: Solution, folder: Path, module_name: str, timeout_s: float) -> None:
    """Compile every source to an object file (no link): all a CPU-only machine can check."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildFailure(Status.RUNTIME_ERROR, "a CUDA solution cannot run on the CPU, and "
                                                 "nvcc is not on PATH for a compile-only check")
    marker = folder / COMPILE_ONLY_MARKER
    if not marker.is_file():
        _compile_objects(solution, folder, module_name, nvcc, timeout_s)
        marker.write_text("nvcc compiled every source\n")
    raise BuildFailure(Status.RUNTIME_ERROR,
                       "compile-only check passed (nvcc compiled every source), but a CUDA "
                       "solution cannot run on the CPU: evaluate it with --device cuda")


def _compile_objects(solution: Solution, folder: Path, module_name: str, nvcc: str,
                     timeout_s: float) -> None:
    start = time.perf_counter()
    for source in solution.sources:
        if not source.path.endswith(CPP_SUFFIXES):
            continue
        command = [nvcc, "-c", "-std=c++17", *_torch_include_flags(folder), "-o",
                   str(folder / f"{source.path}.o"), str(folder / source.path),
                   f"-DTORCH_EXTENSION_NAME={module_name}",
                   "-DTORCH_API_INCLUDE_EXTENSION_H", *solution.compile_options.cuda_cflags]
        remaining = max(1.0, timeout_s - (time.perf_counter() - start))
        finished = run_program_sandboxed(command, remaining, dict(os.environ), folder, folder)
        if finished.timed_out:
            raise BuildFailure(Status.TIMEOUT, f"compile-only check of {source.path} ran past "
                                               f"{timeout_s:g} s")
        if finished.returncode != 0:
            raise BuildFailure(Status.COMPILE_ERROR,
                               f"nvcc (compile-only) failed on {source.path}\n"
                               f"{_tail(finished.log)}")


def _torch_include_flags(folder: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    paths = [str(folder), *include_paths(), sysconfig.get_paths()["include"]]
    return [f"-I{p}" for p in paths]


def _tail(text: str, chars: int = 6000) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]


def _compile_main(spec_path: str) -> None:
    from torch.utils.cpp_extension import load

    spec = json.loads(Path(spec_path).read_text())
    folder = Path(spec["folder"])
    build_dir = folder / "build"
    build_dir.mkdir(exist_ok=True)
    load(name=spec["name"], sources=[str(folder / s) for s in spec["sources"]],
         extra_cflags=spec["cflags"], extra_cuda_cflags=spec["cuda_cflags"],
         extra_ldflags=spec["ld_flags"], extra_include_paths=[str(folder)],
         build_directory=str(build_dir), verbose=True)


if __name__ == "__main__":
    _compile_main(sys.argv[1])
