"""solforge.hgemm: the kernel family, its compile for sm_90a, the space, the tuner's resume
logic, retrieval, the dispatcher and the benchmark summary.

CPU tests run the Triton kernels in the interpreter (conftest sets TRITON_INTERPRET=1) and
compile for sm_90a in a fresh process; gpu tests run everything for real on the H200."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solforge.hgemm import dispatch, kernels
from solforge.hgemm.baselines import NVMATH_MISSING
from solforge.hgemm.bench import BenchRow, markdown, speedups
from solforge.hgemm.bench import summarize as summarize_bench
from solforge.hgemm.budget import run_budgeted
from solforge.hgemm.kernels import wgmma
from solforge.hgemm.measure import Operands, random_operands, relative_error
from solforge.hgemm.retrieve import Choice, Retriever, log_distance, nearest, verify
from solforge.hgemm.space import (
    DECODE_M,
    PROJECTIONS,
    SPACES,
    Config,
    Shape,
    SpaceError,
    check,
    grid_shapes,
    layout_of,
    parse_shape,
    select_shapes,
    shortlist,
    tolerance,
)
from solforge.hgemm.table import (
    MethodTimes,
    Table,
    TableEntry,
    append_entry,
    load_table,
)
from solforge.hgemm.tune import TuneSettings, progress_path, tune
from solforge.measure.timing import Timing, summarize
from solforge.problem.suite import open_problem

REPO = Path(__file__).resolve().parents[2]
DOT = {"GROUP_M": 8, "NUM_STAGES": 2, "NUM_WARPS": 4, "ACC_FP16": 0}


def dot(kernel: str, bm: int, bn: int, bk: int, **more: int) -> Config:
    return Config.of(kernel, **{**DOT, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **more})


def gemv(bm: int, bn: int, bk: int, split: int) -> Config:
    return Config.of("gemv", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_STAGES=2, NUM_WARPS=4,
                     SPLIT_K=split)


# Every Triton variant on ragged shapes (no size a multiple of its tiles), M = 1 decode among
# them; each runs in both dtypes and both B layouts.
INTERPRETER_CASES = [
    (dot("tiled", 16, 32, 32), (70, 136, 200)),
    (dot("persistent", 16, 32, 32), (70, 136, 200)),
    (dot("tma", 64, 64, 64), (70, 136, 200)),
    (dot("tma_persistent", 64, 64, 64), (130, 72, 136)),
    (dot("splitk", 16, 32, 64, SPLIT_K=3), (1, 40, 1000)),
    (dot("streamk", 64, 64, 32), (70, 136, 200)),
    (gemv(1, 64, 64, 1), (1, 100, 130)),
    (gemv(4, 32, 32, 4), (3, 72, 200)),
    (dot("tiled", 16, 64, 64), (1, 72, 136)),
]


def operands_for(m: int, n: int, k: int, dtype: str, layout: str) -> Operands:
    return random_operands(Shape(m, n, k, dtype, layout), torch.device("cpu"), seed=m + n + k)


@pytest.mark.slow
@pytest.mark.parametrize("config,size", INTERPRETER_CASES,
                         ids=[f"{c.kernel}-{'x'.join(map(str, s))}" for c, s in INTERPRETER_CASES])
def test_every_triton_variant_is_correct_in_the_interpreter(config, size):
    for dtype in ("float16", "bfloat16"):
        for layout in ("nn", "nt"):
            shape = Shape(*size, dtype, layout)
            assert check(config, shape) is None
            operands = operands_for(*size, dtype, layout)
            out = kernels.run(config, operands.a, operands.b)
            error = relative_error(out, operands.reference)
            assert error <= tolerance(shape), (dtype, layout, error)


def test_float16_accumulation_runs_within_its_documented_tolerance():
    shape = Shape(33, 40, 1000, "float16", "nn", "fp16")
    config = dot("tiled", 16, 32, 32, ACC_FP16=1)
    operands = random_operands(shape, torch.device("cpu"))
    out = kernels.run(config, operands.a, operands.b)
    assert relative_error(out, operands.reference) <= tolerance(shape)
    assert tolerance(shape) > tolerance(Shape(33, 40, 1000))  # looser than fp32 accumulation


def test_stream_k_covers_tiles_split_across_programs_and_whole_ones():
    # 9 tiles x 4 K slices over the interpreter's 3 programs: 12 iterations each, so programs
    # hold whole tiles and begin and end inside others.
    operands = operands_for(190, 190, 256, "float16", "nn")
    out = kernels.run(dot("streamk", 64, 64, 64), operands.a, operands.b)
    assert relative_error(out, operands.reference) <= 1e-3


# -- compiled for sm_90a, read off the SASS ---------------------------------------------------

COMPILE_CASES = [
    (dot("tiled", 128, 128, 64, NUM_WARPS=8, NUM_STAGES=3), Shape(1024, 1024, 1024)),
    (dot("persistent", 128, 128, 64, NUM_WARPS=8, NUM_STAGES=3),
     Shape(1000, 1024, 1000, "bfloat16", "nt")),
    (dot("tma", 128, 256, 64, NUM_WARPS=8, NUM_STAGES=3), Shape(4096, 4096, 4096)),
    (dot("tma_persistent", 128, 128, 64, NUM_WARPS=8, NUM_STAGES=3),
     Shape(2048, 2048, 2048, "bfloat16", "nt")),
    (dot("splitk", 64, 64, 64, SPLIT_K=8), Shape(64, 64, 16384)),
    (dot("streamk", 128, 128, 64, NUM_WARPS=8, NUM_STAGES=3), Shape(3072, 3072, 2048)),
    (gemv(1, 64, 128, 8), Shape(1, 4096, 4096, "bfloat16", "nt")),
    (dot("tiled", 128, 128, 64, NUM_WARPS=8, NUM_STAGES=3, ACC_FP16=1),
     Shape(1024, 1024, 1024, "float16", "nn", "fp16")),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every case compiled for sm_90a in a fresh process (Triton out of interpreter mode)."""
    folder = tmp_path_factory.mktemp("compile")
    jobs = [{"config": c.to_json(), "shape": s.to_json()} for c, s in COMPILE_CASES]
    (folder / "jobs.json").write_text(json.dumps(jobs))
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "solforge.hgemm.precompile",
                           str(folder / "jobs.json"), str(folder / "results.json"), "--sass"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_every_triton_variant_compiles_for_sm90a_with_the_instructions_it_is_for(compiled):
    found = {(r["config"]["kernel"], r["config"]["params"].get("ACC_FP16")): r for r in compiled}
    assert not [r["failure"] for r in compiled if r["failure"]]
    for kernel in ("tiled", "persistent", "tma", "tma_persistent", "splitk", "streamk"):
        assert found[kernel, 0]["instructions"]["HGMMA"] > 0, kernel  # wgmma, not mma.sync
    for kernel in ("tma", "tma_persistent"):
        assert found[kernel, 0]["instructions"]["UTMALDG"] > 0  # cp.async.bulk.tensor loads
        assert found[kernel, 0]["instructions"]["UTMASTG"] > 0  # and the TMA store of C
    assert found["tiled", 0]["instructions"]["UTMALDG"] == 0
    assert found["gemv", None]["instructions"]["FFMA"] > 0  # CUDA cores, no tensor cores
    assert found["gemv", None]["instructions"]["HGMMA"] == 0
    assert found["tiled", 1]["instructions"]["HGMMA"] > 0  # float16 accumulation, still wgmma
    assert set(found["splitk", 0]["kernels"]) == {"_partials", "_sum_splits"}
    assert set(found["streamk", 0]["kernels"]) == {"_stream", "_fix_split_tiles"}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_cuda_kernel_compiles_for_sm90a_with_wgmma_and_tma(tmp_path):
    import triton  # its wheel carries cuobjdump

    obj = tmp_path / "wgmma.o"
    done = subprocess.run(["nvcc", "-c", *wgmma.CUDA_FLAGS, str(wgmma.KERNEL_SOURCE), "-o",
                           str(obj)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", str(obj)],
                          capture_output=True, text=True, timeout=120).stdout
    kernels_built = sass.count("Function : ")
    assert kernels_built == 16  # 4 tiles x 2 dtypes x 2 B layouts
    assert "HGMMA.64x256x16.F32.BF16" in sass and "HGMMA.64x128x16.F32" in sass
    assert "UTMALDG.2D" in sass  # cp.async.bulk.tensor
    assert "USETMAXREG" in sass  # setmaxnreg moved registers to the consumers


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None or not Path("/usr/local/cuda/include").is_dir(),
                    reason="needs g++ and the CUDA headers")
def test_the_torch_binding_of_the_cuda_kernel_compiles(tmp_path):
    from torch.utils.cpp_extension import include_paths

    # PyTorch's CPU wheel ships c10/cuda headers without the one its build generates.
    stub = tmp_path / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    stub.parent.mkdir(parents=True)
    stub.write_text("#pragma once\n")
    flags = [f"-I{path}" for path in [*include_paths(), str(tmp_path), "/usr/local/cuda/include"]]
    done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-w", *flags,
                           str(wgmma.BINDING_SOURCE)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# -- the space ---------------------------------------------------------------------------------

def test_the_shape_sets_are_cuda_l2s_grid_plus_decode_and_prefill_of_the_suites_models():
    assert len(grid_shapes()) == 1000
    shapes = select_shapes(["grid", "decode", "prefill"])
    assert len(shapes) == 1000 + len(PROJECTIONS) * (len(DECODE_M) + 4)
    assert shapes == sorted(shapes, key=lambda s: (s.flops, s.key))
    assert {s.m for s in select_shapes(["decode"])} == set(DECODE_M)
    assert all(s.layout == "nt" for s in select_shapes(["decode", "prefill"]))


@pytest.mark.parametrize("projection", PROJECTIONS, ids=lambda p: p.name)
def test_each_projection_is_a_bundled_problem_of_that_size(projection):
    problem = open_problem(projection.name)
    weight = [spec for spec in problem.definition.inputs.values() if len(spec.shape) == 2][1]
    largest = max(problem.workloads, key=lambda w: math.prod(problem.axes(w).values()))
    axes = problem.axes(largest)
    assert (axes[weight.shape[0]], axes[weight.shape[1]]) == (projection.n, projection.k)
    assert weight.dtype.name == projection.dtype


def test_check_rejects_what_an_h200_block_or_tma_cannot_do():
    big = dot("tiled", 256, 256, 128, NUM_STAGES=5, NUM_WARPS=8)
    assert "shared memory" in check(big, Shape(4096, 4096, 4096))
    assert "TMA" in check(dot("tma", 64, 64, 64), Shape(100, 100, 100))
    assert "float16 accumulation" in check(dot("tiled", 64, 64, 64, ACC_FP16=1),
                                           Shape(64, 64, 64))
    assert "BLOCK_M=1 < M=2" in check(gemv(1, 64, 64, 1), Shape(2, 64, 64))
    assert "outside" in check(dot("tiled", 48, 64, 64), Shape(64, 64, 64))
    assert "unknown kernel" in check(Config.of("magic"), Shape(64, 64, 64))
    with pytest.raises(SpaceError):
        Shape(64, 64, 64, "bfloat16", "nn", "fp16")
    with pytest.raises(SpaceError):
        parse_shape("64x64")


def test_shortlists_hold_valid_candidates_of_every_kind_that_fits():
    for shape in select_shapes(["grid", "decode", "prefill"])[::37]:
        found = shortlist(shape)
        assert 1 <= len(found) <= 10
        assert all(check(config, shape) is None for config in found)
    decode = {c.kernel for c in shortlist(Shape(1, 4096, 4096, "bfloat16", "nt"))}
    assert {"gemv", "splitk"} <= decode
    large = {c.kernel for c in shortlist(Shape(16384, 16384, 16384))}
    assert {"tma", "tma_persistent", "tiled", "wgmma", "streamk"} <= large
    assert "splitk" in {c.kernel for c in shortlist(Shape(64, 64, 16384))}
    extra = dot("tiled", 32, 64, 64)
    assert shortlist(Shape(512, 512, 512), extra=[extra])[0] == extra


def test_layout_of_tells_row_major_b_from_a_transposed_weight():
    assert layout_of(torch.empty(64, 32)) == "nn"
    assert layout_of(torch.empty(32, 64).T) == "nt"
    assert layout_of(torch.empty(64, 64)[:, ::2]) is None


def test_every_kernel_has_a_space_and_a_launcher():
    assert set(SPACES) == set(kernels.VARIANTS)


# -- the table, the budget and the tuner -------------------------------------------------------

def fake_timing(ms: float, rounds: int) -> Timing:
    return summarize("kernel", [ms] * rounds)


class FakeMeasurer:
    """CPU operands and real correctness; times from a rule, so no GPU is needed."""

    device = torch.device("cpu")

    def __init__(self, torch_ms: float = 1.0, kernel_ms: float = 0.5) -> None:
        self.torch_ms, self.kernel_ms = torch_ms, kernel_ms
        self.timed: list[tuple[str, ...]] = []

    def operands(self, shape: Shape) -> Operands:
        return random_operands(shape, self.device)

    def time(self, calls, method, rounds, gap_s=None):
        self.timed.append(tuple(calls))
        return {name: fake_timing(self.ms(name), rounds) for name in calls}

    def ms(self, name: str) -> float:
        if name.startswith("cublaslt") or name == "torch":
            return self.torch_ms
        return self.kernel_ms + 0.01 * len(name)  # distinct, deterministic per candidate

    def synchronize(self) -> None:
        return None


class FakeClock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


TINY = [Shape(16, 32, 64), Shape(16, 64, 64), Shape(32, 32, 64), Shape(2, 32, 64)]
QUICK = TuneSettings(shortlist=2, neighbours=1, finalists=1, screen_rounds=1, final_rounds=2)


def test_the_tuner_stops_at_its_budget_and_resumes_where_it_stopped(tmp_path):
    table_path = tmp_path / "table.jsonl"
    first = tune(TINY, table_path, FakeMeasurer(), QUICK, budget_s=1.0,
                 clock=FakeClock(0.1), sm_count=4)
    assert first.stopped_by_budget and 0 < first.done < len(TINY)
    assert len(load_table(table_path)) == first.done
    with table_path.open("a") as handle:
        handle.write('{"shape": {"m": 16, "n"')  # a write cut short by a time limit
    second = tune(TINY, table_path, FakeMeasurer(), QUICK, clock=FakeClock(0.1), sm_count=4)
    assert second.done == len(TINY) - first.done and not second.stopped_by_budget
    table = load_table(table_path)
    assert len(table) == len(TINY) and table.skipped_lines == 1
    entry = table.get(TINY[0])
    assert entry.use_kernel and entry.best is not None  # 0.5 ms beat torch's 1.0 ms
    assert entry.times["tuned"].error <= tolerance(TINY[0])
    assert entry.time("torch") == 1.0 and entry.time("tuned", "graph") is not None
    nvmath_here = importlib.util.find_spec("nvmath") is not None
    assert (NVMATH_MISSING in entry.notes) != nvmath_here


def test_the_tuner_leaves_torch_matmul_where_the_kernel_does_not_win_by_the_noise(tmp_path):
    table_path = tmp_path / "table.jsonl"
    tune(TINY[:1], table_path, FakeMeasurer(torch_ms=1.0, kernel_ms=0.99), QUICK, sm_count=4)
    entry = load_table(table_path).get(TINY[0])
    assert entry.best is not None and not entry.use_kernel


def test_a_shape_started_twice_without_finishing_is_recorded_as_failed(tmp_path):
    table_path = tmp_path / "table.jsonl"
    for _ in range(2):
        with progress_path(table_path).open("a") as handle:
            handle.write(json.dumps({"started": TINY[0].key}) + "\n")
    tune(TINY[:1], table_path, FakeMeasurer(), QUICK, sm_count=4)
    entry = load_table(table_path).get(TINY[0])
    assert entry.best is None and not entry.use_kernel and "started twice" in entry.notes[0]


def test_neighbours_winners_lead_the_next_shortlist(tmp_path):
    table_path = tmp_path / "table.jsonl"
    winner = dot("tiled", 16, 32, 64)
    near = TableEntry(Shape(16, 32, 128), winner, True, {"tuned": MethodTimes(0.1)})
    append_entry(table_path, near)
    measurer = FakeMeasurer()
    tune(TINY[:1], table_path, measurer, QUICK, sm_count=4)
    candidates = load_table(table_path).get(TINY[0]).candidates
    assert candidates[0].config == winner


def test_the_budget_calibrates_estimates_by_the_time_items_took():
    clock = FakeClock(0.0)
    seconds = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}

    def work(item):
        clock.now += 2 * seconds[item]  # each takes twice its estimate

    report = run_budgeted(list(seconds), work, seconds.get, budget_s=5.0, clock=clock)
    assert report.done == 2  # after two, the third would need 2 more seconds: 6 > 5
    assert report.remaining_estimate_s == pytest.approx(4.0)


def test_table_entries_survive_the_json_round_trip(tmp_path):
    entry = TableEntry(Shape(1, 4096, 4096, "bfloat16", "nt"), gemv(1, 64, 128, 8), True,
                       {"tuned": MethodTimes(0.01, 0.009, 1e-3), "torch": MethodTimes(0.02)},
                       environment={"gpu": "NVIDIA H200"}, seconds=1.5, notes=("n",))
    append_entry(tmp_path / "t.jsonl", entry)
    assert load_table(tmp_path / "t.jsonl").get(entry.shape) == entry


# -- retrieval ---------------------------------------------------------------------------------

def entry_at(m: int, n: int, k: int, config: Config, dtype: str = "float16",
             layout: str = "nn") -> TableEntry:
    return TableEntry(Shape(m, n, k, dtype, layout), config, True, {"tuned": MethodTimes(1.0)})


def test_nearest_shapes_are_taken_in_log2_space_with_the_same_layout():
    a, b, c = dot("tiled", 16, 32, 32), dot("tiled", 32, 32, 32), dot("tiled", 64, 64, 64)
    table = Table()
    for entry in (entry_at(1024, 1024, 1024, a), entry_at(4096, 4096, 4096, b),
                  entry_at(1000, 1000, 1000, c, layout="nt"),
                  entry_at(2048, 2048, 2048, c, dtype="bfloat16")):
        table.add(entry)
    found = nearest(table, Shape(1500, 1500, 1500), 2)
    assert [e.shape.m for e in found] == [1024, 2048]  # nt skipped; bf16 costs half a step
    assert log_distance(Shape(1024, 1024, 1024), Shape(2048, 2048, 2048)) == pytest.approx(
        math.sqrt(3))


def test_verify_keeps_a_neighbours_kernel_only_where_it_beats_torch():
    shape = Shape(16, 32, 64)
    config = dot("tiled", 16, 32, 32)
    assert verify(shape, [config], FakeMeasurer(kernel_ms=0.5)).config == config
    assert verify(shape, [config], FakeMeasurer(kernel_ms=2.0)).config is None
    assert verify(shape, [], FakeMeasurer()).config is None


def test_the_retriever_verifies_once_and_remembers_on_disk(tmp_path):
    table = Table()
    table.add(entry_at(16, 32, 128, dot("tiled", 16, 32, 32)))
    measurer = FakeMeasurer()
    retriever = Retriever(table, measurer, tmp_path / "cache.jsonl")
    shape = Shape(16, 32, 64)
    first = retriever.choose(shape)
    assert retriever.choose(shape) == first and len(measurer.timed) == 1
    again = Retriever(table, FakeMeasurer(), tmp_path / "cache.jsonl")
    assert again.choices[shape.key] == first
    assert Choice.from_json(first.to_json()) == first


# -- the dispatcher ----------------------------------------------------------------------------

@pytest.mark.slow
def test_matmul_falls_back_to_torch_on_the_cpu_and_for_other_inputs():
    dispatch.use_table(Table(), retrieval=False)
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 4, dtype=torch.float16)
    assert torch.equal(dispatch.matmul(a, b), torch.matmul(a, b))
    assert dispatch.shape_of(a, b) is None
    batched = torch.randn(2, 8, 16)
    assert dispatch.matmul(batched, torch.randn(16, 4)).shape == (2, 8, 4)


def test_the_dispatcher_follows_the_table_and_never_runs_what_cannot_run_here():
    win, lose = Shape(64, 64, 64), Shape(128, 128, 128)
    cuda_only = Shape(256, 256, 256)
    config = dot("tiled", 64, 64, 64)
    table = Table()
    table.add(TableEntry(win, config, True, {}))
    table.add(TableEntry(lose, config, False, {}))
    table.add(TableEntry(cuda_only, Config.of("wgmma", BLOCK_M=128, BLOCK_N=128), True, {}))
    dispatcher = dispatch.Dispatcher(table)
    cpu = torch.device("cpu")
    assert dispatcher.choose_shape(win, cpu) == config
    assert dispatcher.choose_shape(lose, cpu) is None
    assert dispatcher.choose_shape(cuda_only, cpu) is None  # the CUDA kernel needs the GPU
    assert dispatcher.choose_shape(Shape(512, 512, 512), cpu) is None  # unseen, no retrieval


def test_the_operator_works_under_torch_compile_through_its_fake():
    dispatch.use_table(Table(), retrieval=False)
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 4, dtype=torch.float16)

    def model(x, y):
        return dispatch.matmul(x, y).float() * 2

    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(a, b), model(a, b))
    torch.library.opcheck(torch.ops.solforge.hgemm.default, (a, b))


# -- the benchmark summary ---------------------------------------------------------------------

def row(shape: Shape, dispatch_ms: float, torch_ms: float) -> BenchRow:
    timings = {"kernel": {"dispatch": dispatch_ms, "torch": torch_ms,
                          "cublaslt_autotuned": torch_ms},
               "graph": {"dispatch": dispatch_ms, "torch": torch_ms}}
    return BenchRow(shape, "x", {"dispatch": 1e-4, "torch": 1e-4},
                    {"offline": timings, "server": timings})


def test_the_summary_gives_the_goal_numbers():
    cube = Shape(8192, 8192, 8192)
    rows = [row(Shape(64, 64, 64), 0.5, 1.0), row(cube, 1.0, 1.0),
            row(Shape(1, 4096, 4096, "bfloat16", "nt"), 1.0, 0.9)]
    table = Table()
    table.add(TableEntry(cube, None, False, {"tuned": MethodTimes(1.25, 1.25),
                                             "torch": MethodTimes(1.0, 1.0),
                                             "cublaslt_autotuned": MethodTimes(1.1, 1.1)}))
    summary = summarize_bench(rows, table)
    offline = summary["dispatch_speedup"]["torch"]["offline"]["kernel"]
    assert offline["geomean"] == pytest.approx((2.0 * 1.0 * 0.9) ** (1 / 3))
    assert offline["minimum"] == pytest.approx(0.9) and offline["below_noise"] == 1
    assert not summary["goal"]["no_shape_slower_beyond_noise"]
    assert summary["tuned_vs_cublaslt_autotuned"]["kernel"]["fraction"] == 0.0
    assert summary["large_cubes"][0]["tuned_vs_torch"] == pytest.approx(0.8)
    assert summary["dispatch_vs_torch_by_set"]["decode"]["shapes"] == 1
    assert "| 8192^3 |" in markdown(summary, rows)
    assert speedups([("a", math.nan)], 0.02).shapes == 0


# -- on the GPU --------------------------------------------------------------------------------

GPU_SHAPES = [(1, 4096, 4096), (100, 256, 1000), (1000, 1024, 520)]  # decode, ragged


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_every_variant_is_correct_on_the_gpu(dtype, layout):
    device = torch.device("cuda")
    for size in GPU_SHAPES:
        shape = Shape(*size, dtype, layout)
        operands = random_operands(shape, device)
        fixed = [config for config, _ in COMPILE_CASES if check(config, shape) is None]
        configs = [config for config in dict.fromkeys([*shortlist(shape), *fixed])
                   if kernels.runs_here(config, device)]  # the CUDA kernel unless disabled
        assert len({config.kernel for config in configs}) >= 3
        for config in configs:
            out = torch.full((shape.m, shape.n), float("nan"), dtype=shape.torch_dtype,
                             device=device)
            kernels.launch(config, operands.a, operands.b, out)
            error = relative_error(out, operands.reference)
            assert error <= tolerance(shape), (shape.key, config.label, error)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_wgmma_kernel_is_correct_for_each_tile(dtype, layout):
    if not wgmma.available():
        pytest.skip(f"the wgmma kernel is kept out: {wgmma.unavailable_reason()}")
    device = torch.device("cuda")
    for size in ((200, 264, 1000), (4096, 4096, 4096), (64, 128, 64)):
        shape = Shape(*size, dtype, layout)
        operands = random_operands(shape, device)
        for block_m, block_n in wgmma.TILES:
            config = Config.of("wgmma", BLOCK_M=block_m, BLOCK_N=block_n)
            out = torch.full((shape.m, shape.n), float("nan"), dtype=shape.torch_dtype,
                             device=device)
            kernels.launch(config, operands.a, operands.b, out)
            assert relative_error(out, operands.reference) <= tolerance(shape), config.label


@pytest.mark.gpu
def test_float16_accumulation_error_on_the_gpu_is_within_its_tolerance():
    for k in (256, 4096, 16384):
        shape = Shape(256, 256, k, "float16", "nn", "fp16")
        operands = random_operands(shape, torch.device("cuda"))
        out = kernels.run(dot("tma", 128, 128, 64, NUM_STAGES=3, ACC_FP16=1), operands.a,
                          operands.b)
        assert relative_error(out, operands.reference) <= tolerance(shape)


@pytest.mark.gpu
def test_the_dispatcher_runs_its_kernel_in_cuda_graphs_and_under_torch_compile():
    shape = Shape(64, 64, 16384)
    config = dot("splitk", 64, 64, 64, SPLIT_K=8)
    table = Table()
    table.add(TableEntry(shape, config, True, {}))
    dispatch.use_table(table, retrieval=False)
    operands = random_operands(shape, torch.device("cuda"))
    a, b = operands.a, operands.b
    assert dispatch.active().choose(a, b) == config
    graph = torch.cuda.CUDAGraph()
    dispatch.matmul(a, b)  # warm-up outside the capture
    with torch.cuda.graph(graph):
        captured = dispatch.matmul(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(captured, operands.reference) <= tolerance(shape)
    compiled = torch.compile(lambda x, y: dispatch.matmul(x, y) * 1, fullgraph=True)
    assert relative_error(compiled(a, b), operands.reference) <= tolerance(shape)


@pytest.mark.gpu
def test_tune_and_bench_end_to_end_on_the_gpu(tmp_path):
    from solforge.hgemm.bench import bench, load_rows
    from solforge.hgemm.measure import CudaMeasurer

    shapes = [Shape(64, 64, 4096), Shape(1, 4096, 4096, "bfloat16", "nt")]
    table_path = tmp_path / "tune.jsonl"
    tune(shapes, table_path, CudaMeasurer(), TuneSettings(shortlist=4, final_rounds=5))
    table = load_table(table_path)
    assert len(table) == 2 and all(e.time("torch") for e in table)
    dispatch.use_table(table, retrieval=False)
    bench(shapes, tmp_path / "bench.jsonl", CudaMeasurer())
    rows = load_rows(tmp_path / "bench.jsonl")
    assert len(rows) == 2
    assert all(r.errors["dispatch"] <= tolerance(r.shape) for r in rows)
    assert all(r.time("dispatch", "server", "graph") for r in rows)


def test_the_gpu_scripts_pass_tunes_benchmarks_resumes_and_reports(tmp_path):
    spec = importlib.util.spec_from_file_location("hgemm_gpu", REPO / "benchmarks" /
                                                  "hgemm_gpu.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    run = script.Run(tmp_path)
    shapes = TINY[:3]
    fast = script.BenchSettings(rounds=2, modes=("offline", "server"), server_gap_ms=0.0)
    script.run_pass(run, shapes[:2], 1e9, FakeMeasurer(), 4, QUICK, fast)
    script.run_pass(run, shapes, 1e9, FakeMeasurer(), 4, QUICK, fast)
    assert len(load_table(run.table)) == 3
    rows = [json.loads(line) for line in run.rows.read_text().splitlines()]
    assert [r["key"] for r in rows] == [s.key for s in shapes]  # each shape once, in order
    script.write_report(run)
    summary = json.loads(run.summary.with_suffix(".json").read_text())
    assert summary["shapes"] == 3
    assert summary["dispatch_speedup"]["torch"]["server"]["graph"]["shapes"] == 3
