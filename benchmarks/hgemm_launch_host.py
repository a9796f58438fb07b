"""The HGEMM launchers' own Python per call, on any machine: each variant's `kernels.launch` with
its Triton kernel replaced by a no-op, so what is left is the host work solforge adds around a
launch (settings, grid, descriptors, buffers). Triton's own launch cost and the GPU are not in it.

    python benchmarks/hgemm_launch_host.py [-o OUT.json] [--calls 20000]

Microseconds per call, the best of five runs of `--calls` calls after an untimed one, on a
16 x 4096 @ 4096 x 4096 float16 product. CPU tensors: the launchers' arithmetic does not depend
on the device, but the persistent variants read the SM count of a CUDA device, so on the CPU
they take the interpreter's path."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from solforge.hgemm import kernels  # noqa: E402
from solforge.hgemm.kernels import gemv, splitk, tiled, tma  # noqa: E402
from solforge.hgemm.measure import host_us_per_call  # noqa: E402
from solforge.hgemm.space import Config  # noqa: E402

TILE = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "NUM_STAGES": 3,
        "NUM_WARPS": 4, "ACC_FP16": 0}
CONFIGS = {name: Config.of(name, **TILE) for name in ("tiled", "persistent", "tma",
                                                        "tma_persistent")}
CONFIGS["splitk"] = Config.of("splitk", **TILE, SPLIT_K=4)
CONFIGS["gemv"] = Config.of("gemv", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=1,
                            NUM_STAGES=1, NUM_WARPS=4)


class _NoLaunch:
    """A Triton kernel that launches nothing: `kernel[grid](...)` returns at once."""

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _stub_kernels() -> None:
    from solforge.hgemm.kernels import blocks
    for module, name in ((tiled, "_tiled"), (tma, "_tma"), (gemv, "_gemv"),
                         (splitk, "_partials"), (blocks, "_sum_splits")):
        setattr(module, name, _NoLaunch())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--out", type=Path)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    _stub_kernels()
    a = torch.empty(16, 4096, dtype=torch.float16)
    b = torch.empty(4096, 4096, dtype=torch.float16)
    out = torch.empty(16, 4096, dtype=torch.float16)
    found = {name: round(host_us_per_call(lambda c=config: kernels.launch(c, a, b, out),
                                           args.calls, runs=5), 2)
             for name, config in CONFIGS.items()}
    record = {"what": "the HGEMM launchers' own Python per call (us), Triton's launch stubbed",
              "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
              "torch": torch.__version__, "machine": platform.machine(),
              "calls": args.calls, "launch_us": found}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
