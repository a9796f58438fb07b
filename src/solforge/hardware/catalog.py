"""Datasheet profiles of the GPUs solforge knows, each figure with its source and derivation.

Since Hopper, NVIDIA's pages quote tensor-core rates "with sparsity" (2:4 structured sparsity
doubles the count); every tensor figure here is the dense one, half the quoted number. Each peak is
written as the product that produces it, SMs x rate per SM per clock x SM clock, which both
checks the datasheet figure and tells the clock it holds at:

    H100/H200 bf16: 132 SMs x 4096 FLOP/clk/SM x 1830 MHz = 989.4 TFLOP/s  (tensor cores)
    H100/H200 fp32: 132 SMs x  256 FLOP/clk/SM x 1980 MHz =  66.9 TFLOP/s  (CUDA cores)

so on Hopper the tensor-core figures are quoted at ~1830 MHz and the CUDA-core (and FP64 tensor)
figures at the 1980 MHz maximum boost clock. Per-SM rates: A100 SM 1024 dense FP16 FMA/clk
(Ampere whitepaper), H100 SM twice that clock for clock (Hopper whitepaper), Blackwell SM twice
Hopper's; FP32 = 2 FLOP x CUDA cores per SM (64 on A100, 128 since Hopper).
Figures taken 2026-11-29 from the pages listed with each entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from solforge.hardware.profile import HardwareProfile, Source
from solforge.hardware.units import (
    SIMT_FP32,
    SIMT_FP64,
    TENSOR_BF16,
    TENSOR_FP4,
    TENSOR_FP8,
    TENSOR_FP16,
    TENSOR_FP64,
    TENSOR_INT8,
    TENSOR_TF32,
)

TAKEN = "2026-11-29"
KIB = 1024
MIB = 1024 * 1024

# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": 64 K 32-bit
# registers per SM on 8.0, 9.0 and 10.0; at most 164 KB shared memory per SM on 8.0, 228 KB on
# 9.0 and 10.0. PTX ISA, "Tensor Memory": 128 lanes x 512 columns x 32 bit = 256 KB per SM (10.0).
REGISTERS_PER_SM = 64 * KIB * 4
_CUDA_GUIDE = Source("https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
                     "#features-and-technical-specifications", TAKEN,
                     "shared memory and registers per SM by compute capability")
_PTX_TMEM = Source("https://docs.nvidia.com/cuda/parallel-thread-execution/index.html"
                   "#tensor-memory", TAKEN, "tensor memory per SM (Blackwell)")


@dataclass(frozen=True)
class DatasheetPeak:
    """One dense datasheet figure and the product it comes from."""

    unit: str
    per_s: float  # the datasheet figure, FLOP/s (OP/s for tensor.int8), dense
    per_clock_per_sm: int  # the SM's rate per clock for this unit
    clock_mhz: float  # the SM clock the figure is quoted at


@dataclass(frozen=True)
class Datasheet:
    name: str
    aliases: tuple[str, ...]
    device_names: tuple[str, ...]  # torch.cuda.get_device_name() / nvidia-smi names of this part
    sm_count: int
    max_sm_clock_mhz: float
    peaks: tuple[DatasheetPeak, ...]
    dram_bytes_per_s: float
    l2_bytes: int
    smem_bytes_per_sm: int
    tensor_memory_bytes_per_sm: int
    sources: tuple[Source, ...]
    notes: str

    def profile(self) -> HardwareProfile:
        return HardwareProfile(
            name=self.name,
            kind="datasheet",
            peaks={p.unit: p.per_s for p in self.peaks},
            peak_clocks_mhz={p.unit: p.clock_mhz for p in self.peaks},
            dram_bytes_per_s=self.dram_bytes_per_s,
            l2_bytes=self.l2_bytes,
            sm_count=self.sm_count,
            smem_bytes_per_sm=self.smem_bytes_per_sm,
            regfile_bytes_per_sm=REGISTERS_PER_SM,
            tensor_memory_bytes_per_sm=self.tensor_memory_bytes_per_sm,
            max_sm_clock_mhz=self.max_sm_clock_mhz,
            sources=self.sources,
            notes=self.notes,
        )


# A100: every figure is quoted at the 1410 MHz boost clock (108 SMs).
A100_SXM_80GB = Datasheet(
    name="A100-SXM-80GB",
    aliases=("a100", "a100-sxm", "a100-80gb", "a100-sxm4-80gb"),
    device_names=("NVIDIA A100-SXM4-80GB",),
    sm_count=108,
    max_sm_clock_mhz=1410,
    peaks=(
        DatasheetPeak(SIMT_FP64, 9.7e12, 64, 1410),  # 108 x 64 x 1.41 GHz = 9.75 T
        DatasheetPeak(SIMT_FP32, 19.5e12, 128, 1410),  # 19.49 T
        DatasheetPeak(TENSOR_FP64, 19.5e12, 128, 1410),  # 19.49 T
        DatasheetPeak(TENSOR_TF32, 156e12, 1024, 1410),  # 155.9 T (312 with sparsity)
        DatasheetPeak(TENSOR_BF16, 312e12, 2048, 1410),  # 311.9 T (624 with sparsity)
        DatasheetPeak(TENSOR_FP16, 312e12, 2048, 1410),
        DatasheetPeak(TENSOR_INT8, 624e12, 4096, 1410),  # 623.7 TOP/s (1248 with sparsity)
    ),
    dram_bytes_per_s=2.039e12,  # 80 GB HBM2e, SXM: 2,039 GB/s
    l2_bytes=40 * MIB,
    smem_bytes_per_sm=164 * KIB,
    tensor_memory_bytes_per_sm=0,
    sources=(
        Source("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf", TAKEN,
               "peaks (dense column), DRAM bandwidth of the 80GB SXM part"),
        Source("https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/"
               "nvidia-ampere-architecture-whitepaper.pdf", TAKEN,
               "108 SMs, 1410 MHz boost, 40 MB L2, per-SM rates"),
        _CUDA_GUIDE,
    ),
    notes="all peaks quoted at the 1410 MHz boost clock",
)

# Hopper SXM (H100 and H200 share the GH100 die, 132 SMs enabled): tensor-core figures at
# 1830 MHz, CUDA-core and FP64 tensor figures at the 1980 MHz maximum boost clock.
_HOPPER_SXM_PEAKS = (
    DatasheetPeak(SIMT_FP64, 34e12, 128, 1980),  # 132 x 128 x 1.98 GHz = 33.5 T, quoted 34
    DatasheetPeak(SIMT_FP32, 67e12, 256, 1980),  # 66.9 T
    DatasheetPeak(TENSOR_FP64, 67e12, 256, 1980),  # 66.9 T
    DatasheetPeak(TENSOR_TF32, 494.7e12, 2048, 1830),  # 494.7 T (989 with sparsity)
    DatasheetPeak(TENSOR_BF16, 989.4e12, 4096, 1830),  # 989.4 T (1,979 with sparsity)
    DatasheetPeak(TENSOR_FP16, 989.4e12, 4096, 1830),
    DatasheetPeak(TENSOR_FP8, 1979e12, 8192, 1830),  # 1,978.9 T (3,958 with sparsity)
    DatasheetPeak(TENSOR_INT8, 1979e12, 8192, 1830),  # 1,978.9 TOP/s (3,958 with sparsity)
)
_HOPPER_WHITEPAPER = Source("https://resources.nvidia.com/en-us-tensor-core", TAKEN,
                            "H100 architecture whitepaper: 132 SMs (SXM5), per-SM rates")
_HOPPER_NOTES = ("tensor-core peaks (tf32, bf16, fp16, fp8, int8) quoted at 1830 MHz; "
                 "CUDA-core and fp64 tensor peaks at the 1980 MHz maximum boost clock")

H100_SXM = Datasheet(
    name="H100-SXM",
    aliases=("h100", "h100-sxm5", "h100-sxm-80gb"),
    device_names=("NVIDIA H100 80GB HBM3",),
    sm_count=132,
    max_sm_clock_mhz=1980,
    peaks=_HOPPER_SXM_PEAKS,
    dram_bytes_per_s=3.35e12,
    l2_bytes=50 * MIB,
    smem_bytes_per_sm=228 * KIB,
    tensor_memory_bytes_per_sm=0,
    sources=(
        Source("https://www.nvidia.com/en-us/data-center/h100/", TAKEN,
               "H100 SXM peaks (sparse tensor figures, halved), 3.35 TB/s"),
        _HOPPER_WHITEPAPER,
        _CUDA_GUIDE,
    ),
    notes=_HOPPER_NOTES,
)

H200_SXM = Datasheet(
    name="H200-SXM",
    aliases=("h200", "h200-sxm5", "h200-141gb"),
    device_names=("NVIDIA H200",),
    sm_count=132,
    max_sm_clock_mhz=1980,
    peaks=_HOPPER_SXM_PEAKS,
    dram_bytes_per_s=4.8e12,
    l2_bytes=62_914_560,  # 60 MiB: torch.cuda.get_device_properties on the project's H200
    smem_bytes_per_sm=228 * KIB,
    tensor_memory_bytes_per_sm=0,
    sources=(
        Source("https://www.nvidia.com/en-us/data-center/h200/", TAKEN,
               "H200 SXM peaks (sparse tensor figures, halved), 4.8 TB/s"),
        _HOPPER_WHITEPAPER,
        _CUDA_GUIDE,
    ),
    notes=_HOPPER_NOTES + "; L2 read off the device",
)

# B200 in HGX B200 (1000 W), 148 SMs. CUDA-core figures: 148 x 256 x 1980 MHz = 75.0 TFLOP/s, so
# 1980 MHz is taken as the maximum boost clock. Tensor-core figures: 2.25 PFLOP/s dense bf16 /
# (148 SMs x 8192 FLOP/clk/SM, twice Hopper's SM) = 1856 MHz, the quoted tensor clock. Check:
# SOLAR's configs/arch/B200.yaml gives 603,751 bf16 MAC/clk for the whole chip at a locked
# 1.5 GHz (1.811 PFLOP/s), i.e. the same 2.25 PFLOP/s at 1863 MHz; B200@1500MHz here gives
# 1.818 PFLOP/s, within 0.4% of it.
B200 = Datasheet(
    name="B200",
    aliases=("b200-hgx", "b200-sxm", "hgx-b200"),
    device_names=("NVIDIA B200",),
    sm_count=148,
    max_sm_clock_mhz=1980,
    peaks=(
        DatasheetPeak(SIMT_FP64, 37e12, 128, 1980),  # 148 x 128 x 1.98 GHz = 37.5 T, quoted 37
        DatasheetPeak(SIMT_FP32, 75e12, 256, 1980),  # 75.0 T
        DatasheetPeak(TENSOR_FP64, 37e12, 128, 1980),  # FP64 tensor = FP64 CUDA-core rate
        DatasheetPeak(TENSOR_TF32, 1.1e15, 4096, 1856),  # 1.125 P; quoted 2.2 P with sparsity
        DatasheetPeak(TENSOR_BF16, 2.25e15, 8192, 1856),  # 2.250 P (4.5 with sparsity)
        DatasheetPeak(TENSOR_FP16, 2.25e15, 8192, 1856),
        DatasheetPeak(TENSOR_FP8, 4.5e15, 16384, 1856),  # 4.50 P (9 with sparsity)
        DatasheetPeak(TENSOR_INT8, 4.5e15, 16384, 1856),  # 4.50 POP/s (9 with sparsity)
        DatasheetPeak(TENSOR_FP4, 9e15, 32768, 1856),  # 9.00 P (18 with sparsity)
    ),
    dram_bytes_per_s=7.7e12,  # 8 HBM3e stacks, 8192-bit at ~7.5 GT/s
    l2_bytes=126 * MIB,  # torch reports L2_cache_size=126MB on B200; page sources disagree
    smem_bytes_per_sm=228 * KIB,
    tensor_memory_bytes_per_sm=256 * KIB,
    sources=(
        Source("https://www.nvidia.com/en-us/data-center/hgx/", TAKEN,
               "HGX B200 per-GPU peaks (sparse tensor figures, halved), 7.7 TB/s"),
        Source("https://github.com/NVlabs/SOLAR/blob/main/configs/arch/B200.yaml", TAKEN,
               "SOLAR's 1.5 GHz clock-locked B200 (cross-check of the tensor clock)"),
        Source("https://hmc-tech.com/gpus/nvidia-b200-vs-nvidia-b100", TAKEN,
               "148 SMs, 1.98 GHz boost, 1.86 GHz tensor clock (third-party database)"),
        _CUDA_GUIDE,
        _PTX_TMEM,
    ),
    notes=("tensor peaks quoted at 1856 MHz (derived: 2.25 PFLOP/s / (148 SMs x 8192 FLOP/clk)); "
           "CUDA-core and fp64 peaks at 1980 MHz; L2 should be read off the device"),
)

DATASHEETS: dict[str, Datasheet] = {d.name: d for d in (A100_SXM_80GB, H100_SXM, H200_SXM, B200)}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


_BY_KEY: dict[str, Datasheet] = {}
for _sheet in DATASHEETS.values():
    for _name in (_sheet.name, *_sheet.aliases):
        _BY_KEY[_key(_name)] = _sheet


def find_datasheet(name: str) -> Datasheet | None:
    """The datasheet for a catalog name or alias, case-insensitive; None when unknown."""
    return _BY_KEY.get(_key(name))


def datasheet_for_device(device_name: str) -> Datasheet | None:
    """The datasheet of a GPU by the name the driver reports (`NVIDIA H200`), or None.

    Matched exactly: an `NVIDIA H100 PCIe` or `NVIDIA H200 NVL` is a different part with other
    clocks and bandwidth, and must not borrow the SXM figures."""
    for sheet in DATASHEETS.values():
        if device_name.strip() in sheet.device_names:
            return sheet
    return None
