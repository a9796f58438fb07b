"""What one thread block of the target GPU may use, and the estimates that the forge's templates
and the HGEMM tuner compare with it.

The per-SM figures come from the target's hardware profile (TARGET, the H200 the forge compiles
for, sm_90a): a block may have the SM's shared memory less the 1 KB the system keeps per block
(228 KB -> 227 KB on Hopper, opt-in beyond 48 KB, which Triton does), and the SM's register
file (256 KB: 64 K 32-bit registers). Per thread and per block the limits are those of every
compute capability from 7.0 on (CUDA C++ Programming Guide, "Technical Specifications per
Compute Capability"): 255 registers per thread, 1024 threads per block.

The estimates are deliberately simple, so a template can reject a setting before anything
compiles: shared memory from the tiles a pipelined loop keeps in flight (Triton holds
`num_stages` copies of each operand tile), registers from the values each thread keeps live plus
a fixed allowance for addresses, indices and loop state. They are screens, not predictions: the
compiler has the last word. They were checked against what ptxas allocated for the templates'
kernels compiled for sm_90 with Triton 3.6 (cuobjdump -res-usage, via forge.descriptors): a bf16
GEMM tile of 128x128x64 on 4 warps took 186 registers (screen: 192), 64x128x64 took 116 (112),
128x256x64 on 8 warps 182 (176); attention with 64-query, 64-key blocks and head_dim 128 on
4 warps 168 (192), while 128-key blocks (screen: 256, rejected) hit the 255 cap; a 4096-wide
RMSNorm row on 2 warps 92 (160). tests/forge/test_templates.py keeps two of these checks.
"""

from __future__ import annotations

import math

from solforge.hardware.catalog import H200_SXM
from solforge.hardware.profile import HardwareProfile

RESERVED_SHARED_MEMORY_PER_BLOCK = 1024  # bytes the system keeps in each block's shared memory


def shared_memory_per_block(profile: HardwareProfile) -> int:
    return profile.smem_bytes_per_sm - RESERVED_SHARED_MEMORY_PER_BLOCK


TARGET = H200_SXM.profile()
SHARED_MEMORY_PER_BLOCK = shared_memory_per_block(TARGET)
REGISTERS_PER_THREAD = 255
REGISTERS_PER_SM = TARGET.regfile_bytes_per_sm // 4  # 32-bit registers
THREADS_PER_WARP = 32
MAX_THREADS_PER_BLOCK = 1024
REGISTER_ALLOWANCE = 32  # addresses, indices, loop state: a working figure, not a measurement


def threads(num_warps: int) -> int:
    return num_warps * THREADS_PER_WARP


def shared_memory_reason(nbytes: int, what: str) -> str | None:
    if nbytes <= SHARED_MEMORY_PER_BLOCK:
        return None
    return (f"{what} need {nbytes} bytes of shared memory per block, over the "
            f"{SHARED_MEMORY_PER_BLOCK} a block of the {TARGET.name} can have")


def register_reason(values_per_thread: float, num_warps: int, what: str) -> str | None:
    """A screen on registers: the 32-bit values each thread keeps live, plus the allowance.

    Two limits: 255 per thread, and the whole block's registers within one SM's 64 K (else not
    even one block fits on an SM).
    """
    estimate = math.ceil(values_per_thread) + REGISTER_ALLOWANCE
    if estimate > REGISTERS_PER_THREAD:
        return (f"{what} keep about {estimate} registers per thread live, over the "
                f"{REGISTERS_PER_THREAD} a thread can have")
    if estimate * threads(num_warps) > REGISTERS_PER_SM:
        return (f"{what} keep about {estimate} registers per thread live; "
                f"{threads(num_warps)} threads would need more than an SM's {REGISTERS_PER_SM}")
    return None


def threads_reason(num_warps: int) -> str | None:
    if threads(num_warps) <= MAX_THREADS_PER_BLOCK:
        return None
    return f"{num_warps} warps are {threads(num_warps)} threads, over {MAX_THREADS_PER_BLOCK}"


def idle_threads_reason(values: int, num_warps: int, what: str) -> str | None:
    """A block of fewer values than threads leaves threads with nothing to do."""
    if values >= threads(num_warps):
        return None
    return f"{what} = {values} values leave some of the {threads(num_warps)} threads idle"


def tile_words(rows: int, cols: int, num_warps: int) -> float:
    """32-bit values per thread for a [rows, cols] tile spread over the block's threads."""
    return rows * cols / threads(num_warps)


def matmul_words(rows: int, cols: int, depth: int, operand_bytes: int, num_warps: int,
                 accumulators: int = 1) -> float:
    """Registers per thread of a tensor-core tile: its float32 accumulators (rows x cols each)
    and the A operand fragment (rows x depth), operand_bytes per element packed into 32 bits."""
    return (accumulators * tile_words(rows, cols, num_warps)
            + tile_words(rows, depth, num_warps) * operand_bytes / 4)


def first_reason(*reasons: str | None) -> str | None:
    return next((reason for reason in reasons if reason is not None), None)
