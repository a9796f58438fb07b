"""The CUDA C++ member of the family: wgmma + TMA with warp-specialised producer and consumers
(wgmma.cu says how it works), for where Triton's code generation leaves speed behind.

Built once per machine with torch.utils.cpp_extension (ninja; cached in PyTorch's extension
folder, TORCH_EXTENSIONS_DIR) for sm_90a only, with -gencode=arch=compute_90a,code=sm_90a:
wgmma and setmaxnreg exist only there, and a plain sm_90 pass would reject them.
cpp_extension adds no architecture flags of its own when the given flags name one. The kernel
source includes no PyTorch header, so `nvcc -c` can compile it alone
(tests/hgemm/test_hgemm.py does,
on a machine without a GPU). The operator it registers, torch.ops.solforge_hgemm_wgmma.gemm,
runs on the current stream. SOLFORGE_HGEMM_DISABLE_WGMMA=1 keeps the kernel out of a process
(benchmarks/hgemm_gpu.py sets it when the kernel fails its self-test).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from solforge.errors import SolforgeError
from solforge.hgemm.space import SPACES, WGMMA_TILES

SOURCE_DIR = Path(__file__).parent
KERNEL_SOURCE = SOURCE_DIR / "wgmma.cu"
BINDING_SOURCE = SOURCE_DIR / "wgmma_binding.cpp"
EXTENSION_NAME = "solforge_hgemm_wgmma"
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
CUDA_FLAGS = ("-O3", "-std=c++17", *ARCH_FLAGS)
TILES = WGMMA_TILES  # (BLOCK_M, BLOCK_N) wgmma.cu is built for
STAGES = SPACES["wgmma"]["NUM_STAGES"]  # operand stages asked for, each tile built with each
DISABLE_ENV = "SOLFORGE_HGEMM_DISABLE_WGMMA"

_loaded = False
_failure: str | None = None  # why the build failed, so it is tried once per process


class WgmmaBuildError(SolforgeError):
    """The CUDA extension could not be built or loaded here."""


def build(verbose: bool = False) -> None:
    """Build (or find in the cache) and load the extension; idempotent. Needs CUDA and nvcc."""
    global _loaded, _failure
    if _loaded and _failure is None:
        return
    if _failure is None and os.environ.get(DISABLE_ENV) == "1":
        _failure = f"{DISABLE_ENV}=1"
    if _failure is None and not torch.cuda.is_available():
        _failure = "the wgmma kernel needs a CUDA GPU (sm_90a)"
    if _failure is not None:
        raise WgmmaBuildError(_failure)
    from torch.utils.cpp_extension import load

    try:
        load(name=EXTENSION_NAME, sources=[str(BINDING_SOURCE), str(KERNEL_SOURCE)],
             extra_cuda_cflags=list(CUDA_FLAGS), extra_cflags=["-O3"], is_python_module=False,
             verbose=verbose)
    except (OSError, RuntimeError, ImportError) as exc:
        _failure = f"building the wgmma extension failed: {exc}"
        raise WgmmaBuildError(_failure) from exc
    _loaded = True


def disable(reason: str) -> None:
    """Keep the kernel out of this process (a self-test failed): available() turns False."""
    global _failure
    _failure = reason


def available() -> bool:
    """Whether the extension is built and loaded (building it now if it can be)."""
    try:
        build()
    except WgmmaBuildError:
        return False
    return True


def unavailable_reason() -> str | None:
    """Why the kernel cannot run in this process, or None when it can (or was not tried)."""
    return _failure


def launch(params: dict[str, int], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    build()
    torch.ops.solforge_hgemm_wgmma.gemm(a, b, out, params["BLOCK_M"], params["BLOCK_N"],
                                        params["NUM_STAGES"], params["GROUP_M"])
