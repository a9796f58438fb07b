"""The languages a solution may be written in, and what each needs to build and run.

One record per language name that SOL-ExecBench or FlashInfer-Bench solutions use: whether it is
imported as Python in the candidate's process or compiled first (C++/CUDA), the Python package it
needs (checked with `find_spec`, never imported in the driver), the pyproject extra that installs
it, the module the worker imports before its guards take their snapshot (a language runtime
starting its own threads or re-binding torch functions is not the candidate's doing), and the
oldest GPU it can run on. A missing package is a one-line COMPILE_ERROR naming the extra.

Header-only libraries come from their Python distributions, so a plain `pip install` is all a
machine needs: CUTLASS/CuTe C++ headers from the `nvidia-cutlass` wheel (`cutlass_library/
source/include`), TVM-FFI headers and its runtime library from `apache-tvm-ffi`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

PYTHON = "python"
CPP = "cpp"


@dataclass(frozen=True)
class Language:
    name: str
    family: str  # PYTHON: imported by the worker; CPP: compiled by the build step first
    package: str | None = None  # the Python module it needs beyond torch
    extra: str | None = None  # `pip install solforge[extra]` installs that module
    preload: str | None = None  # imported by the worker before the guards' snapshot
    min_capability: tuple[int, int] | None = None  # the oldest GPU (major, minor) it runs on


_ALL = (
    Language("pytorch", PYTHON),
    Language("python", PYTHON),
    Language("triton", PYTHON, "triton", None, "triton"),
    Language("cute_dsl", PYTHON, "cutlass", "cute-dsl", "cutlass"),
    # cuTile compiles to Tile IR, which only Blackwell (compute capability 10.x, 12.x) executes.
    Language("cutile", PYTHON, "cuda.tile", "cutile", "cuda.tile", (10, 0)),
    Language("cudnn_frontend", PYTHON, "cudnn", "cudnn", "cudnn"),
    Language("tilelang", PYTHON, "tilelang", "tilelang", "tilelang"),
    Language("cuda_cpp", CPP),
    Language("cuda", CPP),
    Language("cpp", CPP),
    Language("c++", CPP),
    Language("cutlass", CPP, "cutlass_library", "cutlass"),
    Language("cudnn", CPP),
    Language("cublas", CPP),
)
LANGUAGES = {language.name: language for language in _ALL}
PYTHON_LANGUAGES = tuple(lang.name for lang in _ALL if lang.family == PYTHON)
CPP_LANGUAGES = tuple(lang.name for lang in _ALL if lang.family == CPP)

# C++ bindings: a PyTorch extension (PYBIND11_MODULE / TORCH_LIBRARY), or a TVM-FFI module
# (`TVM_FFI_DLL_EXPORT_TYPED_FUNC`), which is what FlashInfer-Bench builds every CUDA solution as.
TORCH_BINDING = "torch"
TVM_FFI_BINDING = "tvm-ffi"
TVM_FFI_PACKAGE = "tvm_ffi"
TVM_FFI_EXTRA = "tvm-ffi"
TVM_FFI_EXPORT = "TVM_FFI_DLL_EXPORT"


def missing_package(names: tuple[str, ...], binding: str = TORCH_BINDING) -> str | None:
    """A one-line message for the first package these languages need that is not installed."""
    needs = [(LANGUAGES[n].package, LANGUAGES[n].extra, n) for n in names
             if LANGUAGES[n].package is not None]
    if binding == TVM_FFI_BINDING:
        needs.append((TVM_FFI_PACKAGE, TVM_FFI_EXTRA, "the TVM-FFI binding"))
    for package, extra, what in needs:
        if not is_installed(package):
            install = f"pip install 'solforge[{extra}]'" if extra else f"install {package!r}"
            return f"{what} needs the Python package {package!r}, which is not installed " \
                   f"({install})"
    return None


def unsupported_gpu(names: tuple[str, ...], capability: tuple[int, int],
                    gpu_name: str) -> str | None:
    """A one-line message when this GPU is older than a language can run on."""
    for name in names:
        oldest = LANGUAGES[name].min_capability
        if oldest is not None and capability < oldest:
            return (f"language {name} runs on GPUs of compute capability {oldest[0]}.{oldest[1]} "
                    f"or newer (Blackwell); this {gpu_name} is {capability[0]}.{capability[1]}")
    return None


def preload_modules(names: tuple[str, ...], binding: str = TORCH_BINDING) -> tuple[str, ...]:
    modules = [LANGUAGES[n].preload for n in names if LANGUAGES[n].preload is not None]
    if binding == TVM_FFI_BINDING:
        modules.append(TVM_FFI_PACKAGE)
    return tuple(dict.fromkeys(modules))


def cutlass_include_dirs() -> list[Path]:
    """CUTLASS/CuTe headers shipped by the `nvidia-cutlass` wheel (include/ and tools/util)."""
    root = _package_dir("cutlass_library")
    if root is None:
        return []
    source = root / "source"
    dirs = [source / "include", source / "tools" / "util" / "include"]
    return [d for d in dirs if d.is_dir()]


def tvm_ffi_dirs() -> tuple[list[Path], Path | None]:
    """TVM-FFI's include folders (its own and DLPack's) and the folder of libtvm_ffi.so."""
    root = _package_dir(TVM_FFI_PACKAGE)
    if root is None:
        return [], None
    includes = [root / "include", *sorted(root.glob("**/dlpack/include"))]
    libs = sorted(root.glob("**/libtvm_ffi.so"))
    return [d for d in includes if d.is_dir()], (libs[0].parent if libs else None)


def is_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken install
        return False


def _package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
