"""Behaviour descriptors of a candidate, read off its compiled code: the archive's cell axes.

KernelFoundry reads its descriptors from the source text with regular expressions: cheap, but a
comment can game them and they cannot see what the compiler made of the code.
Here the candidate's Triton kernels are compiled for the target GPU and the compiled code is read:
PTX (what Triton asked for), SASS (what ptxas made of it) and TTGIR (Triton's GPU IR, which still
shows loops and tile shapes). A machine without a GPU can do this: Triton compiles for
`GPUTarget("cuda", 90, 32)` without a driver, and its wheel ships ptxas and cuobjdump.

Classification (one rule per axis; each says which instruction proves what):
- memory path: "tma" > "smem_cp_async" > "vector16" > "plain";
- compute path: "wgmma" > "mma_sync" > "cuda_core";
- parallel structure: "warp_specialized" > "split_k" > "persistent" > "tile_per_program"
  (a kernel can show several; the first in this order names its cell);
- tile class: elements per program, "small" < 4096 <= "medium" < 32768 <= "large".
A solution with several launches gets the descriptor of its heaviest kernel: tensor-core kernels
first, then the most work (programs x elements per program), then the longest PTX.

The compiled code comes from capture.py.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from solforge.data.solution import Solution
from solforge.data.workload import Workload
from solforge.forge.capture import (
    CaptureJob,
    CompiledKernel,
    DescriptorError,
    Launch,
    capture_solutions,
)
from solforge.hardware.block_limits import TARGET
from solforge.problem.problem import Problem

MEMORY_PATHS = ("plain", "vector16", "smem_cp_async", "tma")
COMPUTE_PATHS = ("cuda_core", "mma_sync", "wgmma")
PARALLEL_STRUCTURES = ("tile_per_program", "persistent", "split_k", "warp_specialized")
# "unknown" only when there is no TTGIR to read tile shapes from (describe_ptx without it).
TILE_CLASSES = ("small", "medium", "large", "unknown")

# Elements per program. 4096: a 64x64 tile, or 16 elements per thread at 8 warps. 32768: the
# 128x256 / 256x128 GEMM tiles, the largest whose bf16 operands (BK = 64, 3 stages: 144 KiB)
# fit in Hopper's 228 KiB of shared memory per SM.
SMALL_TILE_ELEMENTS = 4096
LARGE_TILE_ELEMENTS = 32768
DEFAULT_SM_COUNT = TARGET.sm_count  # for the persistent-grid rule: 132 on the H100 / H200 SXM

@dataclass(frozen=True)
class Descriptor:
    memory_path: str
    compute_path: str
    parallel: str
    tile_class: str
    evidence: tuple[str, ...]  # the instructions and IR facts behind each value

    def cell(self) -> tuple[str, str, str, str]:
        """The archive key."""
        return (self.memory_path, self.compute_path, self.parallel, self.tile_class)


@dataclass(frozen=True)
class Finding:
    """One axis's value and the facts that decided it."""

    value: str
    evidence: tuple[str, ...]


# -- describing ----------------------------------------------------------------------------------


def describe_solution(solution: Solution, problem: Problem, workload: Workload,
                      target: str = "sm_90a", device: str = "cpu", autotune_config: int = 0,
                      sass: bool = True, sm_count: int = DEFAULT_SM_COUNT,
                      timeout_s: float = 600.0) -> Descriptor:
    """Compile the solution's Triton kernels for `target` on `workload`'s inputs, in a fresh
    process (capture_solutions), and describe the heaviest one (see the module docstring)."""
    job = CaptureJob(solution, problem, workload, autotune_config)
    (outcome,) = capture_solutions([job], target, device, sass, timeout_s)
    if isinstance(outcome, DescriptorError):
        raise outcome
    return describe_kernels(outcome, sm_count)


def describe_kernels(kernels: Sequence[CompiledKernel],
                     sm_count: int = DEFAULT_SM_COUNT) -> Descriptor:
    """The descriptor of the heaviest of a solution's launches (see _weight), which the first
    line of its evidence names."""
    if not kernels:
        raise DescriptorError("no kernels to describe")
    heaviest = max(kernels, key=_weight)
    described = describe_kernel(heaviest, sm_count)
    chosen = (f"kernel: {heaviest.name}, the heaviest of {len(kernels)} launch(es) "
              f"({heaviest.launch.programs} programs, {_instruction_count(heaviest.ptx)} PTX "
              f"instructions)")
    return Descriptor(described.memory_path, described.compute_path, described.parallel,
                      described.tile_class, (chosen, *described.evidence))


def describe_kernel(kernel: CompiledKernel, sm_count: int = DEFAULT_SM_COUNT) -> Descriptor:
    return describe_ptx(kernel.ptx, kernel.sass, kernel.launch, kernel.ttgir, sm_count)


def describe_ptx(ptx: str, sass: str | None, launch: Launch, ttgir: str | None = None,
                 sm_count: int = DEFAULT_SM_COUNT) -> Descriptor:
    """Describe code compiled elsewhere (for instance Triton's cache on the GPU machine).

    Without TTGIR the persistent-loop rule cannot run and the tile class is "unknown"."""
    ptx_ops = _ptx_opcodes(ptx)
    sass_ops = _sass_opcodes(sass) if sass else Counter()
    findings = {
        "memory_path": memory_path(ptx_ops, sass_ops),
        "compute_path": compute_path(ptx_ops, sass_ops),
        "parallel": parallel_structure(ptx_ops, sass_ops, ttgir, launch, sm_count),
        "tile_class": tile_class(ttgir),
    }
    evidence = tuple(f"{axis}={finding.value}: {fact}" for axis, finding in findings.items()
                     for fact in finding.evidence)
    return Descriptor(findings["memory_path"].value, findings["compute_path"].value,
                      findings["parallel"].value, findings["tile_class"].value, evidence)


def _weight(kernel: CompiledKernel) -> tuple[bool, int, int]:
    """Tensor-core kernels first, then programs x elements per program, then PTX length. A
    static guess: a persistent kernel's loop does more work than its grid says, but such kernels
    are nearly always the solution's GEMM, first by tensor cores already."""
    ptx_ops = _ptx_opcodes(kernel.ptx)
    uses_tensor_cores = compute_path(ptx_ops, Counter()).value != "cuda_core"
    work = kernel.launch.programs * _elements_per_program(kernel.ttgir)
    return (uses_tensor_cores, work, sum(ptx_ops.values()))


# -- the rules -----------------------------------------------------------------------------------


def memory_path(ptx_ops: Counter, sass_ops: Counter) -> Finding:
    """How global memory reaches the program, the most capable path found deciding.

    - tma: `cp.async.bulk.tensor` (the tensor memory accelerator, global <-> shared tiles on an
      mbarrier) or a non-tensor bulk copy `cp.async.bulk.shared` / `.global`; SASS UTMALDG /
      UTMASTG / UBLKCP.
    - smem_cp_async: `cp.async.ca|cg.shared.global` (Ampere's asynchronous copy into shared
      memory, what Triton's software pipelining emits for num_stages >= 2); SASS LDGSTS.
    - vector16: 16-byte `ld.global` / `st.global` (`.v4.b32`, `.v2.b64`, ...) carry at least half
      of the bytes of the kernel's global loads and stores; SASS LDG.E[.EL|.EF].128, STG...128.
    - plain: narrower accesses (Triton emits them when it cannot prove 16-byte alignment).
    """
    tma = _found(ptx_ops, "ptx", ("cp.async.bulk.tensor", "cp.async.bulk.shared",
                                  "cp.async.bulk.global"))
    tma += _found(sass_ops, "sass", ("UTMALDG", "UTMASTG", "UBLKCP"))
    if tma:
        return Finding("tma", tma)
    cp_async = _found(ptx_ops, "ptx", ("cp.async.ca.shared", "cp.async.cg.shared"))
    cp_async += _found(sass_ops, "sass", ("LDGSTS",))
    if cp_async:
        return Finding("smem_cp_async", cp_async)
    wide, total = _global_access_bytes(ptx_ops)
    share = f"{wide} of {total} statically accessed global bytes in 16-byte accesses (ptx)"
    if total and 2 * wide >= total:
        wide_sass = Counter({op: n for op, n in sass_ops.items()
                             if op.startswith(("LDG", "STG")) and "128" in op.split(".")})
        return Finding("vector16", (share, *_found(wide_sass, "sass", ("LDG", "STG"))))
    return Finding("plain", (share,))


def compute_path(ptx_ops: Counter, sass_ops: Counter) -> Finding:
    """Which units do the arithmetic.

    - wgmma: `wgmma.mma_async` (Hopper's warpgroup MMA, operands from shared memory, sm_90a);
      SASS HGMMA (fp16/bf16/tf32), QGMMA (fp8), IGMMA (int8).
    - mma_sync: `mma.sync` / `mma.sp` (the warp-level MMA of Ampere); SASS HMMA / IMMA / DMMA
      with no GMMA. A matrix kernel here on Hopper is on the slower path.
    - cuda_core: no matrix instruction at all.
    The axes are Hopper's: Blackwell's tcgen05.mma (sm_100) is not recognised.
    """
    wgmma = _found(ptx_ops, "ptx", ("wgmma.mma_async",))
    wgmma += _found(sass_ops, "sass", ("HGMMA", "QGMMA", "IGMMA"))
    if wgmma:
        return Finding("wgmma", wgmma)
    mma = _found(ptx_ops, "ptx", ("mma.sync", "mma.sp"))
    mma += _found(sass_ops, "sass", ("HMMA", "IMMA", "DMMA"))
    if mma:
        return Finding("mma_sync", mma)
    return Finding("cuda_core", ("no mma / wgmma instruction in the PTX",))


def parallel_structure(ptx_ops: Counter, sass_ops: Counter, ttgir: str | None, launch: Launch,
                       sm_count: int = DEFAULT_SM_COUNT) -> Finding:
    """How the work is spread over programs; the first rule that holds names the cell."""
    rules = (("warp_specialized", _warp_specialized(ptx_ops, sass_ops, ttgir)),
             ("split_k", _split_reduction(ptx_ops, sass_ops)),
             ("persistent", _persistent(ttgir, launch, sm_count)))
    for value, evidence in rules:
        if evidence:
            return Finding(value, evidence)
    checked = "no warp specialisation, float atomics or program-strided work loop"
    if ttgir is None:
        checked += " (no TTGIR: persistent loops not checked)"
    return Finding("tile_per_program", (checked,))


def tile_class(ttgir: str | None) -> Finding:
    """Elements a program works on: the largest tl.dot result (M x N, times the warp-specialised
    partitions that share it) or, without a dot, the largest tensor in the TTGIR (the block)."""
    if ttgir is None:
        return Finding("unknown", ("no TTGIR to read the tile shape from",))
    elements = _elements_per_program(ttgir)
    if elements < SMALL_TILE_ELEMENTS:
        value = "small"
    elif elements < LARGE_TILE_ELEMENTS:
        value = "medium"
    else:
        value = "large"
    source = "tl.dot result" if _dot_results(ttgir) else "largest tensor"
    return Finding(value, (f"{elements} elements per program ({source}, ttgir)",))


def _warp_specialized(ptx_ops: Counter, sass_ops: Counter, ttgir: str | None) -> tuple[str, ...]:
    """`setmaxnreg` (sm_90a: producer warpgroups give registers to consumers) in PTX or SASS
    (USETMAXREG), or Triton's `ttg.warp_specialize` region in TTGIR."""
    evidence = _found(ptx_ops, "ptx", ("setmaxnreg",)) + _found(sass_ops, "sass", ("USETMAXREG",))
    if ttgir is not None and "ttg.warp_specialize" in ttgir:
        partitions = len(re.findall(r"^\s*partition\d+\(", ttgir, re.MULTILINE))
        evidence += (f"ttg.warp_specialize with {partitions} worker partition(s) (ttgir)",)
    return evidence


def _split_reduction(ptx_ops: Counter, sass_ops: Counter) -> tuple[str, ...]:
    """Floating-point atomic adds to global memory (PTX `atom.global...add.f32`,
    `red.global.add.f32`; SASS ATOMG...ADD.F32, RED...ADD.F32): programs accumulate partial
    results of one output, as split-K and stream-K do. Integer atomics (counters, locks) and
    shared-memory atomics do not count."""
    ptx = _float_atomic_adds(ptx_ops, ("atom.global", "red.global"))
    sass = _float_atomic_adds(sass_ops, ("atomg.", "red."))
    return _found(ptx, "ptx", tuple(ptx)) + _found(sass, "sass", tuple(sass))


def _persistent(ttgir: str | None, launch: Launch, sm_count: int) -> tuple[str, ...]:
    """A loop over tiles that starts at the program id and steps by the number of programs
    (`tl.num_programs`, or a constant or argument equal to the grid), with the program's global
    writes inside it; or, where the loop was rewritten (flattened), a grid of exactly one
    program per SM and global writes inside a loop."""
    if ttgir is None:
        return ()
    ir = _TtgirGraph(ttgir)
    grid_sizes = {size for size in (*launch.grid, launch.programs) if size > 1}
    for loop in ir.loops:
        if not (ir.writes_global(loop) and loop.lower in ir.from_program_id):
            continue
        stride = ir.program_count_stride(loop, grid_sizes, dict(launch.int_arguments))
        if stride:
            return (f"scf.for {loop.variable} from the program id, step {stride}, writes global "
                    f"memory (ttgir)",)
    if launch.programs == sm_count and any(ir.writes_global(loop) for loop in ir.loops):
        return (f"grid of {sm_count} programs (one per SM) around a loop that writes global "
                "memory (ttgir)",)
    return ()


# -- reading PTX and SASS ------------------------------------------------------------------------

_PTX_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)", re.MULTILINE)
_SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)",
                               re.MULTILINE)
_VECTOR = re.compile(r"v(\d+)")
_TYPE_BITS = re.compile(r"[bfsu](\d+)")


def _ptx_opcodes(ptx: str) -> Counter:
    return Counter(_PTX_INSTRUCTION.findall(ptx))


def _sass_opcodes(sass: str) -> Counter:
    return Counter(_SASS_INSTRUCTION.findall(sass))


def _instruction_count(ptx: str) -> int:
    return sum(_ptx_opcodes(ptx).values())


def _found(opcodes: Counter, source: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """'N x opcode (source)' for every opcode that starts with one of the prefixes."""
    hits = Counter({op: n for op, n in opcodes.items() if op.startswith(prefixes)})
    return tuple(f"{n}x {op} ({source})" for op, n in hits.most_common())


def _global_access_bytes(ptx_ops: Counter) -> tuple[int, int]:
    """(bytes in accesses of 16 bytes or more, all bytes) over the static global loads and
    stores: `ld.global.v4.b32` moves 4 x 32 bits."""
    wide = total = 0
    for op, count in ptx_ops.items():
        if not op.startswith(("ld.global", "st.global")):
            continue
        parts = op.split(".")
        vector = next((int(m.group(1)) for p in parts if (m := _VECTOR.fullmatch(p))), 1)
        bits = _TYPE_BITS.fullmatch(parts[-1])
        size = vector * int(bits.group(1)) // 8 if bits else 0
        total += size * count
        if size >= 16:
            wide += size * count
    return wide, total


def _float_atomic_adds(opcodes: Counter, prefixes: tuple[str, ...]) -> Counter:
    """The opcodes (matched in lower case) that start with a prefix, add, and name a float
    type (f32, bf16x2, F16x2...)."""
    found: Counter = Counter()
    for op, count in opcodes.items():
        parts = op.lower().split(".")
        names_float = any(p.startswith(("f", "bf")) and any(c.isdigit() for c in p)
                          for p in parts)
        if op.lower().startswith(prefixes) and "add" in parts and names_float:
            found[op] = count
    return found


# -- reading TTGIR -------------------------------------------------------------------------------

_SSA_DEFINITION = re.compile(r"^\s*(%[\w$.-]+)(?::\d+)?\s*=\s*([\w.]+)(.*)$")
_SSA_USE = re.compile(r"%[\w$.-]+")
_FOR_LOOP = re.compile(r"scf\.for (%[\w$.-]+) = (%[\w$.#-]+) to (%[\w$.#-]+) "
                       r"step (%[\w$.#-]+)")
_INT_CONSTANT = re.compile(r"^\s*(%[\w$.-]+) = arith\.constant (-?\d+) : i(?:32|64)",
                           re.MULTILINE)
_GLOBAL_WRITE = re.compile(r"\b(tt\.store|tt\.descriptor_store|tt\.descriptor_reduce|"
                           r"tt\.atomic_rmw|tt\.atomic_cas|ttng\.async_tma_copy_local_to_global|"
                           r"ttng\.async_tma_reduce)\b")
_DOT = re.compile(r"\b(?:tt\.dot|tt\.dot_scaled|ttng\.warp_group_dot)\b.*->\s*"
                  r"tensor<((?:\d+x)+)")
_TENSOR_SHAPE = re.compile(r"tensor<((?:\d+x)+)")
_TASK_ID = re.compile(r"async_task_id = array<i32: (\d+)>")


@dataclass(frozen=True)
class _Loop:
    variable: str
    lower: str
    step: str
    body: tuple[str, ...]


class _TtgirGraph:
    """What the rules need from TTGIR: its loops, and the values computed from the program id
    or the number of programs (followed through every op that uses them)."""

    def __init__(self, ttgir: str) -> None:
        lines = ttgir.splitlines()
        self.loops = _loops(lines)
        self.constants = {name: int(value) for name, value in _INT_CONSTANT.findall(ttgir)}
        self.from_program_id = _derived(lines, "tt.get_program_id")
        self.from_num_programs = _derived(lines, "tt.get_num_programs")

    def writes_global(self, loop: _Loop) -> bool:
        return any(_GLOBAL_WRITE.search(line) for line in loop.body)

    def program_count_stride(self, loop: _Loop, grid_sizes: set[int],
                             int_arguments: dict[str, int]) -> str:
        """How the loop's step equals the number of programs, or '' when it does not."""
        step = loop.step.split("#")[0]
        if step in self.from_num_programs:
            return f"{step} from tl.num_programs"
        value = self.constants.get(step, int_arguments.get(step.lstrip("%")))
        if value in grid_sizes:
            return f"{step} = {value}, the grid size"
        return ""


def _loops(lines: list[str]) -> list[_Loop]:
    depth_before: list[int] = []
    depth = 0
    for line in lines:
        depth_before.append(depth)
        depth += line.count("{") - line.count("}")
    loops = []
    for start, line in enumerate(lines):
        match = _FOR_LOOP.search(line)
        if match is None:
            continue
        end = start + 1
        while end < len(lines) and depth_before[end] > depth_before[start]:
            end += 1
        variable, lower, _, step = match.groups()
        loops.append(_Loop(variable, lower.split("#")[0], step, tuple(lines[start + 1:end])))
    return loops


def _derived(lines: list[str], source_op: str) -> set[str]:
    """SSA values computed (transitively) from the results of `source_op`, loop induction
    variables whose lower bound is one of them included."""
    derived: set[str] = set()
    for line in lines:
        loop = _FOR_LOOP.search(line)
        if loop is not None:
            variable, lower = loop.group(1), loop.group(2).split("#")[0]
            if lower in derived:
                derived.add(variable)
            continue
        definition = _SSA_DEFINITION.match(line)
        if definition is None:
            continue
        name, op, rest = definition.groups()
        uses = {use.split("#")[0] for use in _SSA_USE.findall(rest)}
        if op == source_op or uses & derived:
            derived.add(name)
    return derived


def _dot_results(ttgir: str) -> list[tuple[int, str | None]]:
    """(M x N, the warp-specialisation task id or None) of every dot."""
    results = []
    for line in ttgir.splitlines():
        match = _DOT.search(line)
        if match is None:
            continue
        task = _TASK_ID.search(line)
        results.append((_shape_elements(match.group(1)), task.group(1) if task else None))
    return results


def _elements_per_program(ttgir: str) -> int:
    dots = _dot_results(ttgir)
    if dots:
        largest = max(elements for elements, _ in dots)
        partitions = {task for elements, task in dots if elements == largest}
        return largest * len(partitions)
    shapes = [_shape_elements(shape) for shape in _TENSOR_SHAPE.findall(ttgir)]
    return max(shapes, default=1)


def _shape_elements(dims: str) -> int:
    return math.prod(int(d) for d in dims.rstrip("x").split("x"))


