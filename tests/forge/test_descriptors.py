"""Descriptors read off compiled code: small Triton kernels whose structure is known (elementwise,
GEMMs with and without pipelining, TMA, split-K, persistent, warp-specialised) are compiled for
sm_90 on the CPU and each must land in the cell its code earns; the bundled Triton solutions must
all be describable. Every kernel is captured in one batch (one child process) to keep this fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import REPO, Computed, selected_keys, write_problem

from solforge.data.solution import load_solution, solution_from_python
from solforge.forge.capture import (
    CaptureJob,
    CaptureOutcome,
    CompiledKernel,
    DescriptorError,
    Launch,
    capture_kernels,
    capture_solutions,
)
from solforge.forge.descriptors import (
    COMPUTE_PATHS,
    MEMORY_PATHS,
    PARALLEL_STRUCTURES,
    TILE_CLASSES,
    describe_kernel,
    describe_kernels,
    describe_ptx,
    describe_solution,
    memory_path,
    parallel_structure,
)
from solforge.problem.problem import Problem, load_problem
from solforge.problem.suite import open_problem

ROOT = REPO
BUNDLED_SOLUTIONS = [path for path in sorted((ROOT / "src/solforge/solutions").glob("*/*/*.json"))
                     if "triton" in load_solution(path).languages]
FIXTURE_SOLUTION = ROOT / "tests" / "fixtures" / "harness" / "honest" / "triton_rmsnorm"
FIXTURE_PROBLEM = ROOT / "tests" / "fixtures" / "harness" / "rmsnorm_small"
PYTORCH_SOLUTION = ROOT / "tests" / "fixtures" / "harness" / "honest" / "pytorch_rmsnorm"

ADD_DEFINITION = {
    "name": "add", "op_type": "elementwise",
    "axes": {"n": {"type": "var"}},
    "inputs": {"x": {"shape": ["n"], "dtype": "bfloat16"},
               "y": {"shape": ["n"], "dtype": "bfloat16"}},
    "outputs": {"out": {"shape": ["n"], "dtype": "bfloat16"}},
    "reference": "def run(x, y):\n    return x + y\n",
}
MATMUL_DEFINITION = {
    "name": "matmul", "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "var"}, "K": {"type": "var"}},
    "inputs": {"a": {"shape": ["M", "K"], "dtype": "bfloat16"},
               "b": {"shape": ["K", "N"], "dtype": "bfloat16"}},
    "outputs": {"c": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "reference": "def run(a, b):\n    return a @ b\n",
}

ADD_SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out
'''

AUTOTUNED_ADD_SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4),
                          triton.Config({"BLOCK": 128}, num_warps=1)], key=["n"])
@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) +
             tl.load(y_ptr + offsets, mask=mask), mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    _add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out
'''

# One GEMM source; each job appends its tile and launch constants.
GEMM_SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, K, stride_a, stride_b, stride_c,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * stride_a + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_b + cols[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], acc.to(tl.bfloat16))


def run(a, b):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    _matmul[(m // BM, n // BN)](a, b, c, k, a.stride(0), b.stride(0), c.stride(0),
                                BM=BM, BN=BN, BK=BK, num_warps=WARPS, num_stages=STAGES)
    return c
'''

SPLIT_K_SOURCE = '''
import torch
import triton
import triton.language as tl

SPLIT = 4


@triton.jit
def _matmul_split_k(a_ptr, b_ptr, c_ptr, K, stride_a, stride_b, stride_c,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.program_id(2) * BK, K, BK * SPLIT):
        a = tl.load(a_ptr + rows[:, None] * stride_a + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_b + cols[None, :])
        acc += tl.dot(a, b)
    tl.atomic_add(c_ptr + rows[:, None] * stride_c + cols[None, :], acc)


def run(a, b):
    (m, k), n = a.shape, b.shape[1]
    partial_sums = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    _matmul_split_k[(m // 128, n // 128, SPLIT)](
        a, b, partial_sums, k, a.stride(0), b.stride(0), partial_sums.stride(0),
        BM=128, BN=128, BK=64, SPLIT=SPLIT, num_stages=3)
    return partial_sums.to(a.dtype)
'''

PERSISTENT_SOURCE = '''
import torch
import triton
import triton.language as tl

NUM_SMS = 132


@triton.jit
def _matmul_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       NUM_SMS: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, NUM_SMS):
        rows = (tile // tiles_n) * BM + tl.arange(0, BM)
        cols = (tile % tiles_n) * BN + tl.arange(0, BN)
        ks = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rows[:, None] * stride_a + (k + ks)[None, :])
            b = tl.load(b_ptr + (k + ks)[:, None] * stride_b + cols[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], acc.to(tl.bfloat16))


def run(a, b):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    _matmul_persistent[(NUM_SMS,)](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0),
                                   BM=128, BN=128, BK=64, NUM_SMS=NUM_SMS, num_stages=3)
    return c
'''

# The same loop stepping by tl.num_programs(0), the other common spelling.
STRIDE_BY_NUM_PROGRAMS = PERSISTENT_SOURCE.replace("tiles_n, NUM_SMS):",
                                                   "tiles_n, tl.num_programs(0)):")

TMA_SOURCE = '''
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _matmul_tma(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    row, col = tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(a_desc.load([row, k]), b_desc.load([k, col]))
    c_desc.store([row, col], acc.to(tl.bfloat16))


def run(a, b):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    _matmul_tma[(m // 128, n // 128)](
        TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [64, 128]),
        TensorDescriptor.from_tensor(c, [128, 128]), k, BM=128, BN=128, BK=64, num_stages=3)
    return c
'''

WARP_SPECIALIZED_SOURCE = '''
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _matmul_ws(a_desc, b_desc, c_ptr, K, stride_c, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    row, col = tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        acc += tl.dot(a_desc.load([row, k]), b_desc.load([k, col]))
    rows = row + tl.arange(0, BM)
    cols = col + tl.arange(0, BN)
    tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], acc.to(tl.bfloat16))


def run(a, b):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    _matmul_ws[(m // 128, n // 128)](
        TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [64, 128]),
        c, k, c.stride(0), BM=128, BN=128, BK=64, num_stages=3)
    return c
'''

# tl.arange needs a power-of-two length: this kernel cannot compile.
BROKEN_SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _broken(x_ptr):
    tl.store(x_ptr + tl.arange(0, 100), 1.0)


def run(x, y):
    _broken[(1,)](x)
    return x
'''


# A hostile candidate's import: it tries to write the driver's folder and reads the baseline
# key's path, then says what it got (the capture reports the exception as the job's error).
ESCAPE_SOURCE = '''
import os

import triton  # noqa: F401

try:
    with open({target!r}, "w") as handle:
        handle.write("escaped")
    wrote = "wrote"
except OSError as exc:
    wrote = f"refused ({{exc.errno}})"
raise RuntimeError(f"uid={{os.getuid()}} {{wrote}} key={{os.environ.get('SOLFORGE_BASELINE_KEY')}}")


def run(x, y):
    return x + y
'''


def gemm(block_m: int, block_n: int, block_k: int, warps: int, stages: int) -> str:
    return GEMM_SOURCE + (f"\nBM, BN, BK, WARPS, STAGES = {block_m}, {block_n}, {block_k}, "
                          f"{warps}, {stages}\n")


def bundled_job(path: Path) -> CaptureJob:
    solution = load_solution(path)
    problem = open_problem(f"{path.parent.parent.name}/{solution.definition}")
    return CaptureJob(solution, problem, problem.smallest_workload())


def kernel_job(source: str, name: str, problem: Problem, workload: str = "w0",
               autotune_config: int = 0) -> CaptureJob:
    return CaptureJob(solution_from_python(source, name), problem, problem.workload(workload),
                      autotune_config)


@pytest.fixture(scope="module")
def captured(request, tmp_path_factory):
    """Every job of this file compiled in one child process: {name: kernels or error}. The
    bundled solutions' jobs (most of the capture's time) are compiled only where their test is
    selected, and every bundled job then (its test asks `in captured`)."""
    folder = tmp_path_factory.mktemp("problems")
    add = load_problem(write_problem(folder / "add", ADD_DEFINITION,
                                     [{"axes": {"n": 8192}}, {"axes": {"n": 8190}}]))
    matmul = load_problem(write_problem(folder / "matmul", MATMUL_DEFINITION,
                                        [{"axes": {"M": 512, "N": 512, "K": 512}}]))
    fixture = load_problem(FIXTURE_PROBLEM)
    jobs = {
        "add_aligned": kernel_job(ADD_SOURCE, "add", add, "w0"),
        "add_unaligned": kernel_job(ADD_SOURCE, "add", add, "w1"),
        "autotuned_first": kernel_job(AUTOTUNED_ADD_SOURCE, "add_tuned", add),
        "autotuned_second": kernel_job(AUTOTUNED_ADD_SOURCE, "add_tuned", add, autotune_config=1),
        "gemm_unpipelined": kernel_job(gemm(128, 128, 64, 4, 1), "gemm", matmul),
        "gemm_pipelined": kernel_job(gemm(128, 128, 64, 4, 3), "gemm", matmul),
        "gemm_tiny": kernel_job(gemm(16, 16, 16, 4, 1), "gemm", matmul),
        "split_k": kernel_job(SPLIT_K_SOURCE, "split_k", matmul),
        "persistent": kernel_job(PERSISTENT_SOURCE, "persistent", matmul),
        "persistent_num_programs": kernel_job(STRIDE_BY_NUM_PROGRAMS, "persistent", matmul),
        "tma": kernel_job(TMA_SOURCE, "tma", matmul),
        "warp_specialized": kernel_job(WARP_SPECIALIZED_SOURCE, "ws", matmul),
        "broken": kernel_job(BROKEN_SOURCE, "broken", add),
        "pytorch": CaptureJob(load_solution(PYTORCH_SOLUTION / "solution.py"), fixture,
                              fixture.workloads[0]),
        "fixture_rmsnorm": CaptureJob(load_solution(FIXTURE_SOLUTION / "solution.json"),
                                      fixture, fixture.workloads[0]),
    }
    bundled = {f"bundled:{path.parent.name}": path for path in BUNDLED_SOLUTIONS}

    def capture(names: list[str]) -> list[CaptureOutcome]:
        batch = [jobs[name] if name in jobs else bundled_job(bundled[name]) for name in names]
        began = time.perf_counter()
        outcomes = capture_solutions(batch)
        seconds = time.perf_counter() - began
        compiled = [k for o in outcomes if isinstance(o, tuple) for k in o]
        print(f"\ncaptured {len(batch)} jobs ({len(compiled)} launches) in {seconds:.1f} s; "
              "compile seconds: "
              f"{', '.join(f'{k.name} {k.compile_seconds:.2f}' for k in compiled)}")
        return outcomes

    reads = {"test_fixture_and_bundled_solutions_are_described": list(bundled)}
    return Computed(capture).fetch([*jobs, *selected_keys(request, reads=reads)])


def kernels_of(captured, name: str) -> tuple[CompiledKernel, ...]:
    outcome = captured[name]
    assert not isinstance(outcome, DescriptorError), f"{name}: {outcome}"
    return outcome


def cell_of(captured, name: str) -> tuple[str, str, str, str]:
    return describe_kernels(kernels_of(captured, name)).cell()


def test_elementwise_kernel_is_vector16_only_when_the_length_proves_alignment(captured):
    # n = 8192 is divisible by 16, so the mask keeps whole 8-element groups: ld.global.v4.b32.
    assert cell_of(captured, "add_aligned") == ("vector16", "cuda_core", "tile_per_program",
                                                "small")
    # n = 8190 is not: Triton cannot prove alignment and loads one bf16 at a time.
    assert cell_of(captured, "add_unaligned")[0] == "plain"
    (kernel,) = kernels_of(captured, "add_aligned")
    assert kernel.launch.grid == (8, 1, 1)
    assert kernel.registers is not None and kernel.registers > 0
    assert "LDG.E.128" in kernel.sass


def test_gemm_memory_path_follows_the_pipelining_depth(captured):
    unpipelined = describe_kernels(kernels_of(captured, "gemm_unpipelined"))
    pipelined = describe_kernels(kernels_of(captured, "gemm_pipelined"))
    # num_stages=1: 16-byte loads into registers, then st.shared; num_stages=3: cp.async.
    assert unpipelined.cell() == ("vector16", "wgmma", "tile_per_program", "medium")
    assert pipelined.cell() == ("smem_cp_async", "wgmma", "tile_per_program", "medium")
    assert any("HGMMA" in fact for fact in pipelined.evidence)
    assert any("LDGSTS" in fact for fact in pipelined.evidence)
    (kernel,) = kernels_of(captured, "gemm_pipelined")
    assert kernel.launch.num_stages == 3
    assert kernel.shared_bytes > kernels_of(captured, "gemm_unpipelined")[0].shared_bytes


def test_tiny_dot_uses_mma_sync(captured):
    # A 16x16 tile is below wgmma's 64-row minimum: Triton falls back to mma.sync (HMMA).
    assert cell_of(captured, "gemm_tiny")[1:] == ("mma_sync", "tile_per_program", "small")


def test_tensor_descriptors_compile_to_tma(captured):
    descriptor = describe_kernels(kernels_of(captured, "tma"))
    assert descriptor.cell() == ("tma", "wgmma", "tile_per_program", "medium")
    assert any("cp.async.bulk.tensor" in fact for fact in descriptor.evidence)
    assert any("UTMALDG" in fact for fact in descriptor.evidence)


def test_atomic_accumulation_is_split_k(captured):
    descriptor = describe_kernels(kernels_of(captured, "split_k"))
    assert descriptor.parallel == "split_k"
    assert any("atom.global" in fact and "f32" in fact for fact in descriptor.evidence)


def test_tile_loop_over_a_grid_of_sms_is_persistent(captured):
    descriptor = describe_kernels(kernels_of(captured, "persistent"))
    assert descriptor.cell() == ("smem_cp_async", "wgmma", "persistent", "medium")
    assert any("from the program id" in fact for fact in descriptor.evidence)
    strided = describe_kernels(kernels_of(captured, "persistent_num_programs"))
    assert strided.parallel == "persistent"
    assert any("tl.num_programs" in fact for fact in strided.evidence)


def test_warp_specialize_is_detected(captured):
    descriptor = describe_kernels(kernels_of(captured, "warp_specialized"))
    assert descriptor.parallel == "warp_specialized"
    assert any("setmaxnreg" in fact for fact in descriptor.evidence)
    # Two consumer partitions of 64 x 128 each: the program's tile is still 128 x 128.
    assert descriptor.tile_class == "medium"
    assert any("16384 elements" in fact for fact in descriptor.evidence)


def test_autotuned_kernel_compiles_the_chosen_config(captured):
    (first,) = kernels_of(captured, "autotuned_first")
    (second,) = kernels_of(captured, "autotuned_second")
    assert first.autotune_configs == second.autotune_configs == 2
    assert (first.launch.num_warps, first.launch.grid) == (4, (8, 1, 1))
    assert (second.launch.num_warps, second.launch.grid) == (1, (64, 1, 1))


def test_failures_are_reported_per_job(captured):
    assert "compiling _broken" in str(captured["broken"])
    assert "only Triton solutions" in str(captured["pytorch"])
    assert not isinstance(captured["add_aligned"], DescriptorError)  # the others still ran


def test_a_candidate_captured_for_its_descriptor_cannot_reach_the_drivers_files(tmp_path,
                                                                                 monkeypatch):
    """Capturing runs the candidate's import and entry point: hostile code, run in a sandbox
    like a worker's. It could once rewrite the store, solforge's source or the baseline key's
    signatures from there; now its writes outside its own folder are refused, the key's path is
    not in its environment, and it runs under a uid of its own where this machine allows one."""
    from solforge.harness.sandbox import policy_for

    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(tmp_path / "key"))  # a driver that signs
    tmp_path.chmod(0o700)
    target = tmp_path / "escaped"
    problem = load_problem(FIXTURE_PROBLEM)
    job = CaptureJob(solution_from_python(ESCAPE_SOURCE.format(target=str(target)), "escape"),
                     problem, problem.workloads[0])
    (outcome,) = capture_solutions([job])
    message = str(outcome)
    assert "refused" in message and "key=None" in message, message
    assert not target.exists()
    if policy_for((str(FIXTURE_PROBLEM.resolve()),)).uid_switch:
        assert f"uid={os.getuid()} " not in message, message


@pytest.mark.slow  # compiles and disassembles every bundled Triton solution (most of the 20 s)
def test_fixture_and_bundled_solutions_are_described(captured):
    names = ["fixture_rmsnorm", *(f"bundled:{p.parent.name}" for p in BUNDLED_SOLUTIONS)]
    for name in names:
        descriptor = describe_kernels(kernels_of(captured, name))
        assert descriptor.memory_path in MEMORY_PATHS
        assert descriptor.compute_path in COMPUTE_PATHS
        assert descriptor.parallel in PARALLEL_STRUCTURES
        assert descriptor.tile_class in TILE_CLASSES[:3]
        assert descriptor.evidence[0].startswith("kernel: ")
    # hidden size 256 over 4 warps: 2 bf16 per thread, 4-byte loads.
    assert cell_of(captured, "fixture_rmsnorm") == ("plain", "cuda_core", "tile_per_program",
                                                    "small")
    if "bundled:gemm_bias_gelu_whisper_large_v3_fc1" in captured:
        assert cell_of(captured, "bundled:gemm_bias_gelu_whisper_large_v3_fc1")[1] == "wgmma"
    if "bundled:rmsnorm_llama3_1_8b" in captured:
        assert cell_of(captured, "bundled:rmsnorm_llama3_1_8b")[:2] == ("vector16", "cuda_core")


def test_describe_ptx_matches_the_captured_kernel(captured):
    """The GPU path describes text from Triton's cache: the same text gives the same cell."""
    for name in ("gemm_pipelined", "tma", "split_k", "persistent"):
        (kernel,) = kernels_of(captured, name)
        assert describe_ptx(kernel.ptx, kernel.sass, kernel.launch, kernel.ttgir).cell() == \
            describe_kernel(kernel).cell()
    (kernel,) = kernels_of(captured, "persistent")
    without_ir = describe_ptx(kernel.ptx, None, kernel.launch)
    assert (without_ir.parallel, without_ir.tile_class) == ("tile_per_program", "unknown")


def test_heaviest_kernel_names_a_multi_launch_solution(captured):
    elementwise = kernels_of(captured, "add_aligned")
    matrix = kernels_of(captured, "gemm_pipelined")
    descriptor = describe_kernels([*elementwise, *matrix])
    assert descriptor.compute_path == "wgmma"
    assert descriptor.evidence[0].startswith("kernel: _matmul, the heaviest of 2")


def test_memory_rule_weighs_bytes_not_instructions():
    # One 16-byte load against seven narrower accesses: 16 of 32 bytes, half, is vector16.
    ptx_ops = Counter({"ld.global.v4.b32": 1, "ld.global.b16": 6, "st.global.b32": 1})
    assert memory_path(ptx_ops, Counter()).value == "vector16"
    ptx_ops["ld.global.b16"] = 7  # 16 of 34 bytes: under half
    assert memory_path(ptx_ops, Counter()).value == "plain"
    assert memory_path(Counter({"cp.async.cg.shared.global": 1}), Counter()).value == \
        "smem_cp_async"


def test_integer_atomics_are_not_split_k():
    launch = Launch(grid=(4, 1, 1))
    counters = Counter({"atom.global.add.u32": 2})
    assert parallel_structure(counters, Counter(), None, launch).value == "tile_per_program"
    floats = Counter({"red.global.add.f32": 2})
    assert parallel_structure(floats, Counter(), None, launch).value == "split_k"


def test_bad_target_and_interpreter_mode_are_refused():
    with pytest.raises(DescriptorError, match="sm_90a"):
        capture_solutions([], target="hopper")
    solution = load_solution(FIXTURE_SOLUTION / "solution.json")
    # The test process imported Triton with TRITON_INTERPRET=1 (conftest): no compiling here.
    with pytest.raises(DescriptorError, match="interpreter mode"):
        capture_kernels(solution, [])



# Run on the GPU in a process without the interpreter: the kernel really launches, and the
# PTX / TTGIR that Triton compiled for it are written out for describe_ptx.
_LAUNCH_ON_GPU = '''
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import kernel
a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
c = kernel.run(a, a)
torch.testing.assert_close(c.float(), a.float() @ a.float(), rtol=2e-2, atol=2e-1)
compiled = kernel._matmul[(4, 4)](a, a, c, 512, 512, 512, 512, BM=128, BN=128, BK=64,
                                  num_warps=4, num_stages=3)  # run() returns the compiled kernel
json.dump({"ptx": compiled.asm["ptx"], "ttgir": compiled.asm["ttgir"]}, open(sys.argv[2], "w"))
'''


@pytest.mark.gpu
def test_gpu_compile_gives_the_cpu_capture_cell(tmp_path, make_problem):
    """What Triton compiles when the kernel really runs on the GPU lands in the same cell as the
    CPU's compile-only capture, and the capture also works with CUDA inputs."""
    source = gemm(128, 128, 64, 4, 3)
    (tmp_path / "kernel.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", _LAUNCH_ON_GPU, str(tmp_path), str(tmp_path / "a.json")],
                   check=True, env=env, timeout=600)
    compiled = json.loads((tmp_path / "a.json").read_text())
    on_gpu = describe_ptx(compiled["ptx"], None, Launch(grid=(4, 4, 1)), compiled["ttgir"])
    problem = load_problem(make_problem(MATMUL_DEFINITION,
                                        [{"axes": {"M": 512, "N": 512, "K": 512}}]))
    captured = describe_solution(solution_from_python(source, "gemm"), problem,
                                 problem.workloads[0], device="cuda")
    assert on_gpu.cell() == captured.cell() == ("smem_cp_async", "wgmma", "tile_per_program",
                                                "medium")
