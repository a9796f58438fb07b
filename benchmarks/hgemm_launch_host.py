"""Host microseconds per HGEMM launch, split into solforge's own Python and the rest.

    python benchmarks/hgemm_launch_host.py [-o OUT.json] [--calls 20000] [--device cpu|cuda]

Each variant's `kernels.launch` is timed with its Triton kernels replaced by no-ops: what is
left is the host work solforge adds around a launch (settings, grid, descriptors, buffers),
`python_us`. With `--device cuda` it is also timed launching for real (`launch_us`: the GPU
keeps up with a 16 x 1024 @ 1024 x 1024 float16 product, so this is host time), beside
torch.matmul into the same output (`torch_matmul_us`); `launch_us - python_us` is Triton's
dispatch and the driver's launch (`triton_and_driver_us`), what the dispatcher costs beyond its
own code. Microseconds per call, the best of five runs of `--calls` calls after an untimed one.
On the CPU only `python_us`: the launchers' arithmetic does not depend on the device, but the
persistent variants read the SM count of a CUDA device, so there they take the interpreter's
path."""

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
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    device = torch.device(args.device)
    a = torch.randn(16, 1024, dtype=torch.float16, device=device)
    b = torch.randn(1024, 1024, dtype=torch.float16, device=device)
    out = torch.empty(16, 1024, dtype=torch.float16, device=device)

    def per_variant() -> dict[str, float]:
        return {name: round(host_us_per_call(lambda c=config: kernels.launch(c, a, b, out),
                                             args.calls, runs=5, device=device), 2)
                for name, config in CONFIGS.items()}

    record: dict = {"what": "host microseconds per HGEMM launch: solforge's Python "
                            "(python_us, Triton stubbed) and, on a GPU, the real launch",
                    "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                    "torch": torch.__version__, "machine": platform.machine(),
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda"
                    else "cpu", "calls": args.calls}
    if device.type == "cuda":
        record["launch_us"] = per_variant()
        record["torch_matmul_us"] = round(host_us_per_call(
            lambda: torch.matmul(a, b, out=out), args.calls, runs=5, device=device), 2)
    _stub_kernels()
    record["python_us"] = per_variant()
    if "launch_us" in record:
        record["triton_and_driver_us"] = {name: round(us - record["python_us"][name], 2)
                                          for name, us in record["launch_us"].items()}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
