"""Build the FlashInfer modules of the library baselines here, without a GPU, for the H200.

On a fresh H200 machine, FlashInfer builds four modules before its first library baseline runs:
RoPE, sampling, and two batch-prefill modules (FA2 for the paged decodes, FA3 for the ragged
prefills). They took 62, 127, 30 and 100 s there on 2026-12-05 (flashinfer-setup.json in
benchmarks/results/h200-2026-12-05/), about 5 of a session's 30 device-minutes; a fresh H100
then built RMSNorm's (`norm`) in 40 s (h100-2026-12-06/s15-flashinfer-setup.json). Compiling for
sm_90a needs nvcc, not a GPU. So this script builds the same modules on the CPU machine, named
as FlashInfer names them, and packs them for FlashInfer's ahead-of-time folder
(`flashinfer/data/aot/<module>/<module>.so`), which run_gpu_checks.sh's flashinfer stage fills
from the carry. A module that does not load there is built by FlashInfer as before (it warns and
falls back to its JIT), so a bad archive costs nothing but the carry.

    python benchmarks/flashinfer_aot.py [--record SETUP.json ...] [-o ARCHIVE]

The modules are the ones flashinfer-setup records list as installed ahead of time on a GPU
(default: the two committed records above). benchmarks/carry_flashinfer_aot.sh sets up what
this needs (FlashInfer for this Python, FLASHINFER_CUDA_ARCH_LIST=9.0a, CUDA headers with
cuRAND's and cuBLASLt's, a link stub for libcuda) and runs it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORDS = (REPO / "benchmarks/results/h200-2026-12-05/flashinfer-setup.json",
           REPO / "benchmarks/results/h100-2026-12-06/s15-flashinfer-setup.json")
MANIFEST = "flashinfer-aot.json"  # at the archive's top; the stage checks its version


def wanted_modules(records: Sequence[Path]) -> list[str]:
    """The modules flashinfer-setup records installed ahead of time, each once, in order."""
    names = (name for record in records
             for name in json.loads(record.read_text())["installed_ahead_of_time"])
    return list(dict.fromkeys(names))


def candidate_specs() -> Iterator:
    """FlashInfer JIT specs that the library baselines may need: RMSNorm, RoPE, sampling, and
    the batch-prefill modules (FA2 with equal paged strides, which the paged decode plans with
    tensor cores; FA3 for sm_90, which the ragged prefill takes) for half-precision heads."""
    import torch
    from flashinfer.jit.attention import modules
    from flashinfer.jit.norm import gen_norm_module
    from flashinfer.jit.rope import gen_rope_module
    from flashinfer.jit.sampling import gen_sampling_module

    yield gen_norm_module()
    yield gen_rope_module()
    yield gen_sampling_module()
    for dtype in (torch.bfloat16, torch.float16):
        for head_dim in (64, 128, 256):
            shape = (dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False, False)
            yield modules._gen_batch_prefill_primary_module("fa2", *shape)
            yield modules.gen_batch_prefill_module("fa3", *shape)


def build(names: list[str]) -> tuple[dict[str, Path], dict[str, float], list[str]]:
    """Build each named module: its library, seconds, and the names no spec here makes."""
    specs = {}
    for spec in candidate_specs():  # each prefill spec writes its generated sources: stop early
        if spec.name in names:
            specs[spec.name] = spec
        if len(specs) == len(set(names)):
            break
    libraries, seconds = {}, {}
    for name in names:
        if name not in specs:
            continue
        began = time.perf_counter()
        specs[name].build(verbose=False)
        seconds[name] = round(time.perf_counter() - began, 1)
        libraries[name] = Path(specs[name].jit_library_path)
        print(f"{name}: {seconds[name]} s, {libraries[name].stat().st_size / 1e6:.1f} MB",
              flush=True)
    return libraries, seconds, [n for n in names if n not in specs]


def loads(library: Path) -> str:
    """Whether the module opens in TVM-FFI here ("yes", or the error): its CUDA runtime and
    TVM-FFI symbols resolve; its kernels need the H200."""
    import tvm_ffi

    try:
        tvm_ffi.load_module(str(library))
    except Exception as exc:  # recorded in the manifest: the H200 may still load it
        return f"{type(exc).__name__}: {exc}"[:300]
    return "yes"


def pack(archive: Path, libraries: dict[str, Path], manifest: dict) -> None:
    """`<module>/<module>.so` for each, beside the manifest, xz-packed."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        text = (json.dumps(manifest, indent=1) + "\n").encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
        for name, library in sorted(libraries.items()):
            tar.add(library, arcname=f"{name}/{name}.so")


def nvcc_version() -> str:
    from flashinfer.jit.cpp_ext import get_cuda_path

    done = subprocess.run([f"{get_cuda_path()}/bin/nvcc", "--version"], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", type=Path, nargs="+", default=list(RECORDS))
    parser.add_argument("-o", "--out", type=Path, default=REPO / ".fi/flashinfer-aot.tar.xz")
    args = parser.parse_args()
    import flashinfer

    names = wanted_modules(args.record)
    libraries, seconds, unknown = build(names)
    manifest = {"flashinfer": flashinfer.__version__, "nvcc": nvcc_version(),
                "cuda_arch_list": os.environ.get("FLASHINFER_CUDA_ARCH_LIST"),
                "modules": sorted(libraries), "build_seconds": seconds,
                "loads_here": {name: loads(path) for name, path in sorted(libraries.items())},
                "not_built": unknown,
                "from_records": [record.name for record in args.record]}
    pack(args.out, libraries, manifest)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {len(libraries)} modules"
          + (f"; no spec here for {unknown} (the H200 builds them)" if unknown else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
