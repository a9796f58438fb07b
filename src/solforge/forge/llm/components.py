"""The built-in prompt components: the first variants of each meta-prompt slot.

Three slots, as in KernelFoundry (arXiv 2603.12440): an optimisation philosophy (how to attack
the problem), a strategy library (techniques that pay on Hopper with Triton 3.x) and common
pitfalls (what makes a kernel wrong or slow). Each slot starts with a few variants that differ
in emphasis; the bandit in metaprompt.py learns which ones lead to faster correct kernels and
the model rewrites the weakest. The numbers quoted are H100/H200 datasheet facts (132 SMs,
227 KB of shared memory per block, 64K 32-bit registers per SM).
"""

from __future__ import annotations

PHILOSOPHY = "philosophy"
STRATEGIES = "strategies"
PITFALLS = "pitfalls"
SLOTS = (PHILOSOPHY, STRATEGIES, PITFALLS)
SLOT_TITLES = {PHILOSOPHY: "Optimisation philosophy", STRATEGIES: "Strategy library",
               PITFALLS: "Common pitfalls"}
SLOT_PURPOSES = {
    PHILOSOPHY: "how to approach a kernel: what to aim at and in what order",
    STRATEGIES: "concrete Triton techniques for NVIDIA Hopper GPUs, by kind of bottleneck",
    PITFALLS: "mistakes that make Triton kernels wrong or slow, and how to avoid them",
}

_ROOFLINE_FIRST = """\
Start from the speed-of-light analysis: it says which resource binds.
- Memory-bound: time is bytes / bandwidth. Read every input once, write every output once, fuse
  all the reference's steps into one kernel, and keep intermediates in registers. Aim at 80-90%
  of DRAM bandwidth.
- Compute-bound: time is FLOPs / tensor-core peak. Feed the tensor cores with tl.dot on large
  tiles, accumulate in float32, pipeline the loads behind the math.
Correctness comes first: a kernel that fails the check scores zero, however fast it is."""

_ONE_CHANGE = """\
Improve the best parent in one deliberate step. Read its source, find the single largest gap
between it and the speed of light (extra passes over memory, a poor tile shape, too few programs
to fill 132 SMs, a launch per step), fix that gap, and keep everything that already works.
Small, well-understood changes are easier to get right than rewrites; state in one sentence
which gap you closed."""

_RESTRUCTURE = """\
When the parents are far from the speed of light (S well under 0.8), tuning parameters will not
close the gap: change the algorithm. Fuse every pass into one kernel, pick a different work
split (one program per row vs. many rows per program, a persistent grid, split-K for skinny
products), or change where data lives (registers vs. shared memory). Then choose block sizes
for the new structure. Keep the reference's arithmetic order where it affects rounding."""

_MEMORY_BOUND = """\
Memory-bound kernels (elementwise, norms, softmax, RoPE, reductions):
- Coalesce: the fastest-moving index of tl.arange must walk the contiguous dimension.
- Vectorise: contiguous, 16-byte aligned accesses become 128-bit loads (ld.global.v4); help the
  compiler with tl.multiple_of / tl.max_contiguous on offsets, and pick BLOCK and num_warps so
  each thread holds a multiple of 16 bytes (8 bf16 values).
- Rows that fit in registers (up to ~8K-16K elements) are reduced by one program in one pass;
  longer rows loop over chunks, accumulating sum and sum of squares (or a running max and sum
  for softmax) in float32.
- Short rows: give each program several rows (a 2D block [ROWS, COLS]) so every program moves
  at least ~16 KB; too few bytes per program leaves the SMs idle.
- Many rows: a persistent grid (a small multiple of the 132 SMs, looping over rows with
  tl.range) saves launch and scheduling cost.
- num_warps 4 for rows up to ~2K elements, 8 up to ~8K, 16 beyond.
- Streaming data: eviction_policy="evict_first"; a weight reused by every row: "evict_last"."""

_COMPUTE_BOUND = """\
Compute-bound kernels (GEMM and its fusions, attention):
- tl.dot on bf16/fp16 (or fp8 e4m3 on sm_90) tiles with a float32 accumulator; BLOCK_M and
  BLOCK_N of 64-256 and BLOCK_K of 32-128; every dot dimension at least 16.
- num_warps 4 or 8 (a multiple of 4 lets Triton emit Hopper wgmma); num_stages 3-5, within
  shared memory: stages * (BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * bytes per element <= 227 KB.
- Order programs in groups along M (GROUP_M = 8) so neighbouring programs share tiles in L2.
- Persistent GEMM: launch min(tiles, 132) programs that loop over tiles.
- Few output tiles (skinny M or N, fewer tiles than SMs): split-K with a float32 reduction.
- Tensor descriptors (tl.make_tensor_descriptor, TMA on Hopper) for large, aligned operands.
- Fuse the epilogue (bias, activation, residual, scaling, the cast) before the single store.
- @triton.autotune over a handful of configs keyed on the shape axes when shapes vary."""

_FUSION_AND_LAUNCH = """\
Whole-problem view:
- One kernel for the whole reference where possible: every extra kernel re-reads its input
  from DRAM and costs a launch (several microseconds, which dominates small workloads).
- Choose the grid from the shapes: enough programs to fill 132 SMs several times over, but not
  thousands of programs doing a few hundred bytes each.
- Compute scalars and shape-derived constants on the host; pass sizes as arguments and block
  sizes as tl.constexpr (triton.next_power_of_2 for a dimension that is not a power of two).
- Keep run(...) thin: no torch operations that launch their own kernels, no .item() or other
  host synchronisation, no allocation beyond what the kernel needs (the outputs are given)."""

_CORRECTNESS = """\
- Mask every load and store whose index can pass the end; give masked loads the identity of
  what follows (other=0.0 for sums, float("-inf") for a max).
- Accumulate in float32 and cast once, at the store; follow the reference's order of casts
  (if it rounds to bfloat16 before a multiply, do the same).
- Offsets overflow int32 past 2^31 elements: build them from row.to(tl.int64) * stride.
- tl.arange needs a power-of-two tl.constexpr length; pad with a mask.
- Pass strides (tensor.stride(i)) instead of assuming a layout, or check contiguity.
- Write into the output tensors you are given; allocating new ones leaves them untouched.
- Scalar inputs arrive as Python numbers; 0-D tensors as tensors."""

_SPEED_TRAPS = """\
- A BLOCK so large that each thread holds hundreds of values spills registers to local memory
  and runs slower than a smaller block with a loop.
- tl.atomic_add on a few addresses serialises; reduce in registers, then store once.
- Too few programs (one per output row of a 16-row input) leaves most SMs idle: split the work
  along another dimension.
- Inputs of tl.dot must share a dtype; mixed inputs add conversions inside the loop.
- Do not autotune over dozens of configs: each one is compiled and timed at the first call.
- Launch overhead matters below ~10 microseconds: one launch, no host-side loops over rows."""

_INTEGRITY = """\
- Every timed call gets fresh inputs and every output is checked: outputs cached from an
  earlier call, work skipped because the inputs look familiar, or results computed on another
  stream or thread are caught and recorded as REWARD_HACK.
- Do not call the reference or a library implementation of the same operation (torch.nn.
  functional, torch.matmul, ...) for the main computation: the task is a Triton kernel.
- Numerical checks use the problem's tolerance; a cheaper precision (fp8 where the reference
  computes in bf16) fails unless the tolerance allows it."""

BUILT_IN: tuple[tuple[str, str, str], ...] = (
    (PHILOSOPHY, "roofline-first", _ROOFLINE_FIRST),
    (PHILOSOPHY, "one-change", _ONE_CHANGE),
    (PHILOSOPHY, "restructure", _RESTRUCTURE),
    (STRATEGIES, "memory-bound", _MEMORY_BOUND),
    (STRATEGIES, "compute-bound", _COMPUTE_BOUND),
    (STRATEGIES, "fusion-and-launch", _FUSION_AND_LAUNCH),
    (PITFALLS, "correctness", _CORRECTNESS),
    (PITFALLS, "speed-traps", _SPEED_TRAPS),
    (PITFALLS, "integrity", _INTEGRITY),
)
