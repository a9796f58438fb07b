"""What the HGEMM tuner covers: the shapes, each kernel's settings, and which settings to try.

Shapes (about 1,100):
- the CUDA-L2 grid: M, N, K each in {64, ..., 16384}, 1,000 shapes, float16,
  B row-major ("nn", C = A @ B as torch.matmul gets it);
- decode: M in {1, 2, 4, 8, 16, 32} against the real (N, K) of the suite's model projections
  (CUDA-L2 has none), in the models' dtype, B as an nn.Linear weight ("nt": B = weight.T, the
  transpose of a row-major [N, K]);
- prefill: the same projections at M in {128, 512, 4096, 16384}.

Each kernel variant (kernels/__init__.py) has a space of settings; `check` rejects a setting
an H200 block cannot hold or a shape the kernel cannot take (the screens of the forge's
templates, hardware/block_limits.py, plus alignment rules), so nothing invalid reaches a
compile. `shortlist` prunes the space per shape to about ten candidates: a small roofline model
(per-wave time of a tile: its FLOPs at the SM's share of the tensor peak, scaled by a tile
efficiency, or its operand bytes at the SM's share of bandwidth) ranks the tile shapes, and the
best few go in as tiled, TMA and persistent kernels, with split-K when the tiles cannot fill the
GPU, stream-K when the last wave would be partial, the CUDA wgmma kernel where it applies, and
GEMV / small-M split-K kernels for decode. The model ranks; it predicts nothing the table keeps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import torch
import triton

from solforge.errors import SolforgeError
from solforge.hardware.block_limits import (
    TARGET,
    first_reason,
    matmul_words,
    register_reason,
    shared_memory_reason,
    threads_reason,
    tile_words,
)

GRID_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)  # CUDA-L2's M, N, K
DECODE_M = (1, 2, 4, 8, 16, 32)
PREFILL_M = (128, 512, 4096, 16384)
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("nn", "nt")  # B [K, N] row-major, or the transpose of a row-major [N, K]
ACCUMULATE = ("fp32", "fp16")
SHAPE_SETS = ("grid", "decode", "prefill")


@dataclass(frozen=True)
class Projection:
    """A linear layer of a suite model: out = x @ weight.T with weight [N, K]."""

    name: str  # the suite problem it comes from
    n: int
    k: int
    dtype: str


# The (N, K) of the suite's GEMM problems (config.json of each model; see the problems'
# descriptions). tests/hgemm/test_hgemm.py checks that each one is a bundled problem with these
# sizes.
PROJECTIONS = (
    Projection("l1/gemm_llama3_1_8b_qkv", 6144, 4096, "bfloat16"),
    Projection("l1/gemm_llama3_1_8b_o_proj", 4096, 4096, "bfloat16"),
    Projection("l1/gemm_llama3_1_8b_gate_up", 28672, 4096, "bfloat16"),
    Projection("l1/gemm_llama3_1_8b_down", 4096, 14336, "bfloat16"),
    Projection("l1/gemm_llama3_1_70b_qkv", 10240, 8192, "bfloat16"),
    Projection("l1/gemm_llama3_1_70b_o_proj", 8192, 8192, "bfloat16"),
    Projection("l1/gemm_llama3_1_70b_gate_up", 57344, 8192, "bfloat16"),
    Projection("l1/gemm_llama3_1_70b_down", 8192, 28672, "bfloat16"),
    Projection("l1/lm_head_llama3_1_8b", 128256, 4096, "bfloat16"),
    Projection("l1/lm_head_qwen3_8b", 151936, 4096, "bfloat16"),
    Projection("l1/gemm_bias_gelu_whisper_large_v3_fc1", 5120, 1280, "float16"),
)

# The pruning model's figures, from the target's hardware profile (the H200's datasheet: dense
# fp16 tensor-core rate, HBM3e bandwidth). Launchers read the SM count off the device.
SM_COUNT = TARGET.sm_count
TENSOR_PEAK_FLOPS = TARGET.peaks["tensor.fp16"]
DRAM_BYTES_PER_S = TARGET.dram_bytes_per_s
LAUNCH_GAP_S = 2e-6  # a second launch inside a graph (split-K sums, stream-K fix-up)
WORKSPACE_LIMIT_BYTES = 256 * 2**20  # float32 partials of split-K and GEMV


class SpaceError(SolforgeError):
    """A shape or a kernel setting that does not exist."""


@dataclass(frozen=True)
class Shape:
    """One HGEMM: C[m, n] = A[m, k] @ B[k, n] in `dtype`, B laid out as `layout`."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    layout: str = "nn"
    accumulate: str = "fp32"  # "fp16": kernels may accumulate in float16 (fp16 inputs only)

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise SpaceError(f"M, N and K must be positive, got {self.m}x{self.n}x{self.k}")
        if self.dtype not in DTYPES:
            raise SpaceError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.layout not in LAYOUTS:
            raise SpaceError(f"layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if self.accumulate not in ACCUMULATE:
            raise SpaceError(f"accumulate {self.accumulate!r} is not one of "
                             f"{', '.join(ACCUMULATE)}")
        if self.accumulate == "fp16" and self.dtype != "float16":
            raise SpaceError("float16 accumulation needs float16 inputs")

    @property
    def key(self) -> str:
        return f"{self.dtype}:{self.layout}:{self.accumulate}:{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k  # one multiply and one add per (m, n, k)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def to_json(self) -> dict[str, object]:
        return {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype,
                "layout": self.layout, "accumulate": self.accumulate}

    @classmethod
    def from_json(cls, record: dict) -> Shape:
        return cls(int(record["m"]), int(record["n"]), int(record["k"]), record["dtype"],
                   record["layout"], record.get("accumulate", "fp32"))


def layout_of(b: torch.Tensor) -> str | None:
    """"nn" for a row-major B [K, N], "nt" for the transpose of a row-major [N, K], else None."""
    if b.dim() != 2:
        return None
    if b.stride(1) == 1 and b.stride(0) >= b.shape[1]:
        return "nn"
    if b.stride(0) == 1 and b.stride(1) >= b.shape[0]:
        return "nt"
    return None


def grid_shapes(dtype: str = "float16", layout: str = "nn",
                accumulate: str = "fp32") -> list[Shape]:
    return [Shape(m, n, k, dtype, layout, accumulate)
            for m in GRID_SIZES for n in GRID_SIZES for k in GRID_SIZES]


def decode_shapes() -> list[Shape]:
    return [Shape(m, p.n, p.k, p.dtype, "nt") for p in PROJECTIONS for m in DECODE_M]


def prefill_shapes() -> list[Shape]:
    return [Shape(m, p.n, p.k, p.dtype, "nt") for p in PROJECTIONS for m in PREFILL_M]


def shape_set(names: Iterable[str]) -> list[Shape]:
    """The shapes of the named sets, smallest work first (so a budgeted pass covers most)."""
    makers = {"grid": grid_shapes, "decode": decode_shapes, "prefill": prefill_shapes}
    shapes = []
    for name in names:
        if name not in makers:
            raise SpaceError(f"unknown shape set {name!r} (sets: {', '.join(SHAPE_SETS)})")
        shapes.extend(makers[name]())
    return sorted(dict.fromkeys(shapes), key=lambda s: (s.flops, s.key))


def select_shapes(sets: Iterable[str] = (), shapes: Iterable[str] = (), dtype: str = "float16",
                  layout: str = "nn", accumulate: str = "fp32") -> list[Shape]:
    """The named sets plus the shapes given as "MxNxK" (in dtype, layout, accumulate), each
    once, smallest work first. With accumulate "fp16", the sets' float16 shapes only."""
    chosen = [replace(shape, accumulate=accumulate) for shape in shape_set(sets)
              if accumulate == "fp32" or shape.dtype == "float16"]
    chosen += [parse_shape(text, dtype, layout, accumulate) for text in shapes]
    return sorted(dict.fromkeys(chosen), key=lambda s: (s.flops, s.key))


def set_of(shape: Shape) -> str:
    """The shape set a shape belongs to: "grid", "decode", "prefill", or "other"."""
    if all(size in GRID_SIZES for size in (shape.m, shape.n, shape.k)) and shape.layout == "nn":
        return "grid"
    if any((p.n, p.k) == (shape.n, shape.k) for p in PROJECTIONS):
        return "decode" if shape.m in DECODE_M else "prefill"
    return "other"


def parse_shape(text: str, dtype: str = "float16", layout: str = "nn",
                accumulate: str = "fp32") -> Shape:
    """"MxNxK" (or M,N,K) as a Shape."""
    parts = text.replace(",", "x").lower().split("x")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
        raise SpaceError(f"shape {text!r}: expected MxNxK, e.g. 4096x4096x4096")
    m, n, k = (int(part) for part in parts)
    return Shape(m, n, k, dtype, layout, accumulate)


# -- kernel settings -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """One kernel variant with all its settings."""

    kernel: str
    params: tuple[tuple[str, int], ...]  # sorted by name

    @classmethod
    def of(cls, kernel: str, **params: int) -> Config:
        return cls(kernel, tuple(sorted((name, int(value)) for name, value in params.items())))

    def as_dict(self) -> dict[str, int]:
        return dict(self.params)

    @property
    def label(self) -> str:
        short = {"BLOCK_M": "BM", "BLOCK_N": "BN", "BLOCK_K": "BK", "GROUP_M": "G",
                 "NUM_STAGES": "S", "NUM_WARPS": "W", "SPLIT_K": "SK"}
        settings = " ".join(f"{short[name]}{value}" for name, value in self.params
                            if name in short)
        if self.as_dict().get("ACC_FP16"):
            settings += " acc16"
        return f"{self.kernel} {settings}".strip()

    def to_json(self) -> dict[str, object]:
        return {"kernel": self.kernel, "params": dict(self.params)}

    @classmethod
    def from_json(cls, record: dict) -> Config:
        return cls.of(record["kernel"], **record["params"])


_TILED = {"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_N": (32, 64, 128, 256),
          "BLOCK_K": (32, 64, 128), "GROUP_M": (1, 8), "NUM_STAGES": (2, 3, 4, 5),
          "NUM_WARPS": (4, 8), "ACC_FP16": (0, 1)}
_TMA = {**_TILED, "BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256), "BLOCK_K": (64, 128)}
SPACES: dict[str, dict[str, tuple[int, ...]]] = {
    "tiled": _TILED,
    "persistent": _TILED,
    "tma": _TMA,
    "tma_persistent": _TMA,
    "splitk": {**_TILED, "BLOCK_K": (64, 128, 256),
               "SPLIT_K": (2, 3, 4, 6, 8, 12, 16, 24, 32)},
    "streamk": {**_TILED, "BLOCK_M": (64, 128), "BLOCK_N": (64, 128, 256), "GROUP_M": (8,)},
    "gemv": {"BLOCK_M": (1, 2, 4, 8), "BLOCK_N": (8, 16, 32, 64, 128, 256),
             "BLOCK_K": (32, 64, 128, 256, 512, 1024), "NUM_STAGES": (1, 2, 3, 4),
             "NUM_WARPS": (2, 4, 8), "SPLIT_K": (1, 2, 4, 8, 16, 32)},
    # stages asked for (wgmma.cu caps them by the tile's shared memory); GROUP_M: the swizzle
    "wgmma": {"BLOCK_M": (64, 128), "BLOCK_N": (128, 256), "NUM_STAGES": (3, 4, 6),
              "GROUP_M": (1, 8, 16)},
}
WGMMA_TILES = ((128, 256), (128, 128), (64, 256), (64, 128))  # compiled into wgmma.cu
TMA_KERNELS = ("tma", "tma_persistent", "wgmma")
GEMV_VALUES_PER_THREAD = 128  # the [BLOCK_M, BLOCK_K, BLOCK_N] product a GEMV step keeps live


def check(config: Config, shape: Shape) -> str | None:
    """Why `config` cannot run `shape` on an H200, or None when it can."""
    space = SPACES.get(config.kernel)
    if space is None:
        return f"unknown kernel {config.kernel!r} (kernels: {', '.join(SPACES)})"
    params = config.as_dict()
    if set(params) != set(space):
        return f"{config.kernel} takes {', '.join(sorted(space))}, got {', '.join(sorted(params))}"
    outside = [f"{name}={value}" for name, value in params.items() if value not in space[name]]
    if outside:
        return f"{', '.join(outside)} outside the {config.kernel} space"
    if params.get("ACC_FP16") and shape.accumulate != "fp16":
        return "float16 accumulation was not asked for (accumulate='fp32')"
    if config.kernel in TMA_KERNELS and (shape.k % 8 or shape.n % 8):
        return (f"TMA needs 16-byte row strides: K={shape.k} and N={shape.n} must be "
                "multiples of 8")
    if config.kernel == "wgmma":
        return None  # its tiles are compiled in; wgmma.cu budgets their shared memory
    if config.kernel == "gemv":
        return _gemv_reason(params, shape)
    return first_reason(_split_reason(config.kernel, params, shape), _tile_reason(config, params))


def _tile_reason(config: Config, params: dict[str, int]) -> str | None:
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    warps, stages = params["NUM_WARPS"], params["NUM_STAGES"]
    operands = stages * (bm + bn) * bk * 2  # NUM_STAGES copies of the A and B tiles, 2 bytes
    staged_output = bm * bn * 2 if config.kernel.startswith("tma") else 0  # TMA store buffer
    accumulators = 0.5 if params["ACC_FP16"] else 1.0  # float16 accumulators pack two a word
    words = matmul_words(bm, bn, bk, 2, warps, accumulators)
    return first_reason(
        threads_reason(warps),
        shared_memory_reason(operands + staged_output,
                             f"{stages} stages of {bm}x{bk} and {bk}x{bn} tiles"),
        register_reason(words, warps, f"the {bm}x{bn} accumulator and the {bm}x{bk} operand"),
    )


def _split_reason(kernel: str, params: dict[str, int], shape: Shape) -> str | None:
    if kernel != "splitk":
        return None
    splits = params["SPLIT_K"]
    if splits > triton.cdiv(shape.k, params["BLOCK_K"]):
        return f"SPLIT_K={splits} is more than K={shape.k} has BLOCK_K slices"
    if splits * shape.m * shape.n * 4 > WORKSPACE_LIMIT_BYTES:
        return f"SPLIT_K={splits} float32 partials of {shape.m}x{shape.n} exceed the workspace"
    return None


def _gemv_reason(params: dict[str, int], shape: Shape) -> str | None:
    bm, bn, bk, warps = (params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"],
                         params["NUM_WARPS"])
    if bm < shape.m:
        return f"GEMV covers all rows in one block: BLOCK_M={bm} < M={shape.m}"
    if params["SPLIT_K"] > triton.cdiv(shape.k, bk):
        return f"SPLIT_K={params['SPLIT_K']} is more than K={shape.k} has BLOCK_K slices"
    if params["SPLIT_K"] * shape.m * shape.n * 4 > WORKSPACE_LIMIT_BYTES:
        return "the float32 partials exceed the workspace"
    live = tile_words(bm * bk, bn, warps)
    if live > GEMV_VALUES_PER_THREAD:
        return (f"a {bm}x{bk}x{bn} product step keeps {live:.0f} values a thread live, over "
                f"{GEMV_VALUES_PER_THREAD}")
    return threads_reason(warps)


def tolerance(shape: Shape) -> float:
    """Largest ||C - C_ref|| / ||C_ref|| (Frobenius, against a float32 product) a correct kernel
    may show.

    float32 accumulation: the error is the one rounding of C (2^-11 relative for float16, 2^-8
    for bfloat16; RMS about a third of that) plus float32 sums in another order (~1e-6): bounds
    of 1e-3 and 8e-3 (the interpreter runs of tests/hgemm/test_hgemm.py show 2e-4 and 3.3e-3).
    float16 accumulation rounds the running sum once per k16 step of the tensor core: about
    K/16 roundings of 2^-11 relative adding up like a random walk, so 2^-11 * sqrt(K / 16),
    never below the float16 bound. Emulated on the CPU (float32 sums of 16 products, the
    running sum rounded to float16 after each; M = N = 64) the error is 6.1e-4 at K = 256,
    1.2e-3 at 1024, 2.5e-3 at 4096 and 4.8e-3 at 16384: the bound is about three times that.
    The tuner records every kernel's measured error in the table."""
    if shape.accumulate == "fp16":
        return max(1e-3, 2.0**-11 * math.sqrt(shape.k / 16))
    return 1e-3 if shape.dtype == "float16" else 8e-3


# -- the shortlist -------------------------------------------------------------------------------

# (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES) for tensor-core kernels on Hopper: the
# shapes of Triton's matmul tutorial and of the forge's GEMM template that fit one H200 block.
TILES = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (64, 64, 128, 4, 3),
    (32, 64, 128, 4, 4),
    (16, 64, 128, 4, 4),
)
# Fraction of the tensor peak a tile of this many outputs (BLOCK_M * BLOCK_N) sustains: larger
# tiles reuse each loaded operand more (working figures for the ranking, not measurements).
TILE_EFFICIENCY = ((32768, 0.80), (16384, 0.70), (8192, 0.55), (4096, 0.40), (2048, 0.25),
                   (0, 0.15))
# (BLOCK_N, NUM_WARPS) of the GEMV picks: few weight rows a program, each step as deep in K as
# GEMV_VALUES_PER_THREAD allows (16 rows x 1024 K at M = 1: 32 KB of B in flight a program)
GEMV_ROWS = ((16, 4), (32, 8), (8, 4), (64, 8))
GEMV_MAX_BLOCK_K = 1024
SMALL_M = 32  # at or below: the decode path


def efficiency(outputs: int) -> float:
    return next(value for least, value in TILE_EFFICIENCY if outputs >= least)


def modelled_seconds(shape: Shape, bm: int, bn: int, split: int = 1,
                     sms: int = SM_COUNT) -> float:
    """A roofline per wave for ranking tile shapes (module docstring)."""
    units = triton.cdiv(shape.m, bm) * triton.cdiv(shape.n, bn) * split
    waves = triton.cdiv(units, sms)
    k_each = shape.k / split
    compute = 2 * bm * bn * k_each / (TENSOR_PEAK_FLOPS / sms * efficiency(bm * bn))
    operands = (bm + bn) * k_each * 2 / (DRAM_BYTES_PER_S / min(units, sms))
    extra = 0.0
    if split > 1:  # the float32 partials go out and come back, and a second launch
        extra = shape.m * shape.n * split * 4 * 2 / DRAM_BYTES_PER_S + LAUNCH_GAP_S
    return waves * max(compute, operands) + extra


def fitting_tiles(shape: Shape) -> list[tuple[int, int, int, int, int]]:
    """TILES no taller, wider or deeper than the shape needs."""
    return [tile for tile in TILES
            if tile[0] <= max(16, triton.next_power_of_2(shape.m))
            and tile[1] <= max(32, triton.next_power_of_2(shape.n))
            and tile[2] <= max(32, triton.next_power_of_2(shape.k))]


def splits_to_fill(units: int, k: int, block_k: int, sms: int, waves: int = 2,
                   most: int = 32) -> int:
    """The power-of-two split of K that brings `units` programs up to `waves` waves, keeping
    at least two BLOCK_K slices per split."""
    split = 1
    while units * split < waves * sms and split * 2 <= min(most, k // (2 * block_k)):
        split *= 2
    return split


def shortlist(shape: Shape, sms: int = SM_COUNT, extra: Sequence[Config] = (),
              limit: int = 10) -> list[Config]:
    """The candidates worth timing at `shape`: `extra` (the winners of the nearest tuned shapes)
    first, then the model's picks (module docstring); valid ones only, at most `limit`."""
    acc = 1 if shape.accumulate == "fp16" else 0
    picks = _decode_picks(shape, sms, acc) if shape.m <= SMALL_M else _general_picks(shape, sms,
                                                                                     acc)
    found: list[Config] = []
    for config in [*extra, *picks]:
        if config not in found and check(config, shape) is None:
            found.append(config)
    return found[:limit]


def _dot(kernel: str, tile: tuple[int, int, int, int, int], acc: int, **more: int) -> Config:
    bm, bn, bk, warps, stages = tile
    return Config.of(kernel, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_STAGES=stages,
                     NUM_WARPS=warps, ACC_FP16=acc, **more)


# (BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES) of the tensor-core decode picks (BLOCK_M 16 or 32:
# the M rows padded to one mma): wide and shallow to deep and narrow, best guesses first.
# Narrow tiles first: N / 32 programs fill the SMs at N = 4096 with one launch, where N / 128
# leave half of them idle.
DECODE_TILES = ((32, 128, 4, 4), (64, 128, 4, 4), (128, 128, 4, 4), (32, 64, 4, 5),
                (64, 256, 4, 3), (128, 64, 8, 5), (256, 64, 8, 4))


def _decode_picks(shape: Shape, sms: int, acc: int) -> list[Config]:
    """GEMV (M <= 8), tiled and split-K picks, taken in turn so a short list holds each."""
    gemvs = []
    if shape.m <= 8:
        bm = triton.next_power_of_2(shape.m)
        for bn, warps in GEMV_ROWS:
            bk = GEMV_VALUES_PER_THREAD * 32 * warps // (bm * bn)
            bk = min(bk, GEMV_MAX_BLOCK_K, max(32, triton.next_power_of_2(shape.k)))
            # split to fill two waves, and unsplit: one launch, no float32 partials (the
            # second launch of a split costs its gap in kernel-only time)
            for split in dict.fromkeys((splits_to_fill(triton.cdiv(shape.n, bn), shape.k, bk,
                                                       sms), 1)):
                gemvs.append(Config.of("gemv", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       NUM_STAGES=2, NUM_WARPS=warps, SPLIT_K=split))
    bm = max(16, triton.next_power_of_2(shape.m))
    tiled, split_k = [], []
    for bn, bk, warps, stages in DECODE_TILES:
        tile = (bm, bn, bk, warps, stages)
        tiled.append(_dot("tiled", tile, acc))
        split = splits_to_fill(triton.cdiv(shape.n, bn), shape.k, bk, sms)
        if split > 1:
            split_k.append(_dot("splitk", tile, acc, SPLIT_K=split))
    kinds = [gemvs, tiled, split_k]
    return [kind[turn] for turn in range(max(map(len, kinds))) for kind in kinds
            if turn < len(kind)]


def _general_picks(shape: Shape, sms: int, acc: int) -> list[Config]:
    """Each kernel kind with its best-ranked tiles, taken in turn (the best of every kind
    before the second best of any), so a short list still holds every kind."""
    ranked = sorted(fitting_tiles(shape), key=lambda t: modelled_seconds(shape, t[0], t[1],
                                                                         sms=sms))
    tiles_of = {tile: triton.cdiv(shape.m, tile[0]) * triton.cdiv(shape.n, tile[1])
                for tile in ranked}
    kinds = [
        [_dot("tma", tile, acc) for tile in ranked[:3]],
        _wgmma_picks(shape, sms)[: 0 if acc else 3],
        [_dot("tma_persistent", tile, acc) for tile in ranked[:2] if tiles_of[tile] > sms],
        [_dot("tiled", tile, acc) for tile in ranked[:2]],
        [_dot("splitk", tile, acc, SPLIT_K=splits_to_fill(tiles_of[tile], shape.k, tile[2],
                                                            sms, waves=1))
         for tile in ranked[:2] if 2 * tiles_of[tile] <= sms],
        [_dot("streamk", tile, acc) for tile in ranked[:1]
         if tiles_of[tile] > sms and tiles_of[tile] % sms and shape.k >= 1024],
        [_dot("persistent", tile, acc) for tile in ranked[:1] if tiles_of[tile] > sms],
        _tma_variants(ranked[0], acc) if ranked else [],
    ]
    picks = []
    for turn in range(max(len(kind) for kind in kinds)):
        picks += [kind[turn] for kind in kinds if turn < len(kind)]
    return picks


def _tma_variants(tile: tuple[int, int, int, int, int], acc: int) -> list[Config]:
    """The best tile's TMA kernel with the other warp count, one stage more and one less, and
    no swizzle (GROUP_M 1): where the model's best tile is right, its settings still matter."""
    bm, bn, bk, warps, stages = tile
    tiles = ((bm, bn, bk, 12 - warps, stages), (bm, bn, bk, warps, stages + 1),
             (bm, bn, bk, warps, stages - 1))
    unswizzled = Config.of("tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1,
                           NUM_STAGES=stages, NUM_WARPS=warps, ACC_FP16=acc)
    return [*(_dot("tma", t, acc) for t in tiles), unswizzled]


def _wgmma_picks(shape: Shape, sms: int) -> list[Config]:
    """The CUDA kernel's two best tiles with the deepest pipeline and GROUP_M 8, then the best
    tile with 3 stages and a wider swizzle (GROUP_M 16: more B reuse in L2 on tall shapes)."""
    tiles = _wgmma_tiles(shape, sms)
    picks = [Config.of("wgmma", BLOCK_M=bm, BLOCK_N=bn, NUM_STAGES=6, GROUP_M=8)
             for bm, bn in tiles[:2]]
    if tiles:
        bm, bn = tiles[0]
        picks.append(Config.of("wgmma", BLOCK_M=bm, BLOCK_N=bn, NUM_STAGES=3, GROUP_M=16))
    return picks


def _wgmma_tiles(shape: Shape, sms: int) -> list[tuple[int, int]]:
    """The CUDA kernel's tiles that fit the shape, best first."""
    fitting = [(bm, bn) for bm, bn in WGMMA_TILES
               if bm <= max(64, triton.next_power_of_2(shape.m))]
    return sorted(fitting, key=lambda tile: modelled_seconds(shape, *tile, sms=sms))
