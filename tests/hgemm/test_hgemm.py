"""solforge.hgemm: the kernel family, its compile for sm_90a, the space, the tuner's resume
logic, retrieval, the dispatcher and the benchmark summary.

CPU tests run the Triton kernels in the interpreter (conftest sets TRITON_INTERPRET=1) and
compile for sm_90a in a fresh process; gpu tests run everything for real on the H200."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import triton

from solforge.hgemm import dispatch, kernels, measure
from solforge.hgemm.baselines import NVMATH_MISSING, Baseline, make_baselines, release
from solforge.hgemm.bench import (
    BenchRow,
    BenchSettings,
    demotions,
    estimate_seconds,
    load_rows,
    markdown,
    rounds_for,
    speedups,
)
from solforge.hgemm.bench import summarize as summarize_bench
from solforge.hgemm.budget import run_budgeted
from solforge.hgemm.kernels import wgmma
from solforge.hgemm.measure import Operands, random_operands, relative_error
from solforge.hgemm.retrieve import Choice, Retriever, log_distance, nearest, verify
from solforge.hgemm.roofline import (
    candidates_for,
    floor_seconds,
    headroom,
    plan_order,
    roof_for,
)
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
from solforge.hgemm.tune import TuneSettings, mode_choices, progress_path, tune
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
    (gemv(1, 16, 512, 1), (1, 40, 1024)),  # K a whole number of slices: no mask on K
    (gemv(2, 8, 1024, 2), (2, 20, 3000)),
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
    (gemv(1, 16, 1024, 1), Shape(1, 4096, 4096, "bfloat16", "nt")),
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
    assert found["gemv", None]["instructions"]["LDG.E.128"] > 0  # B in 16-byte vectors
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
    # per dtype and B layout: 3, 4 or 6 stages asked for, capped by each tile's budget: 128x256
    # holds 4 (3, 4), 128x128 6 (3, 4, 6), 64x256 5 (3, 4, 5), 64x128 8 (3, 4, 6)
    assert kernels_built == 2 * 2 * (2 + 3 + 3 + 3)
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


def test_the_dispatcher_follows_the_table_per_mode_and_never_runs_what_cannot_run_here():
    win, lose, graph_only = Shape(64, 64, 64), Shape(128, 128, 128), Shape(32, 64, 64)
    cuda_only = Shape(256, 256, 256)
    config = dot("tiled", 64, 64, 64)
    table = Table()
    table.add(TableEntry(win, config, True, {}))
    table.add(TableEntry(lose, config, False, {}))
    table.add(TableEntry(graph_only, config, False, {}, use_in_graph=True))
    cuda_kernel = Config.of("wgmma", BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4, GROUP_M=8)
    table.add(TableEntry(cuda_only, cuda_kernel, True, {}))
    dispatcher = dispatch.Dispatcher(table)
    cpu = torch.device("cpu")
    assert dispatcher.choose_shape(win, cpu) == (config, config)
    assert dispatcher.choose_shape(lose, cpu) == (None, None)
    assert dispatcher.choose_shape(graph_only, cpu) == (None, config)
    assert dispatcher.choose_shape(cuda_only, cpu) == (None, None)  # the CUDA kernel needs a GPU
    assert dispatcher.choose_shape(Shape(512, 512, 512), cpu) == (None, None)  # no retrieval


@pytest.fixture
def routed(monkeypatch):
    """A dispatcher whose table sends 32x64x64 to a kernel in graphs only, with CPU tensors
    treated as dispatchable (shape_of ignores the device) and the capture flag under control."""
    shape, config = Shape(32, 64, 64), dot("tiled", 32, 64, 64)
    table = Table()
    table.add(TableEntry(shape, config, False, {}, use_in_graph=True))
    capturing = {"now": False}

    def any_device(a, b, accumulate="fp32", aligned=True):
        if a.dtype != torch.float16 or layout_of(b) != "nn":
            return None
        return Shape(a.shape[0], b.shape[1], a.shape[1])

    monkeypatch.setattr(dispatch, "shape_of", any_device)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    active = dispatch.use_table(table, retrieval=False)
    return active, config, capturing


def test_route_decides_once_per_signature_and_follows_the_capture_flag(routed):
    active, config, capturing = routed
    a, b = torch.randn(32, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    for _ in range(50):
        assert active.route(a, b) is None  # eager: torch.matmul
    capturing["now"] = True
    assert active.route(a, b) == config  # captured in a graph: the kernel
    assert active.decisions == 1  # worked out once, then served from the cache
    odd = torch.randn(32 * 64 + 1, dtype=torch.float16)[1:].view(32, 64)
    assert odd.data_ptr() % dispatch.ALIGNMENT and active.route(odd, b) is None
    out = torch.empty(32, 64, dtype=torch.float16)
    assert dispatch.matmul(a, b, out=out) is out  # the kernel (interpreter) writes into out
    assert relative_error(out, a.float() @ b.float()) <= tolerance(Shape(32, 64, 64))
    strided = torch.empty(64, 32, dtype=torch.float16).T  # not row-major: torch.matmul's job
    assert torch.equal(dispatch.matmul(a, b, out=strided), torch.matmul(a, b))
    capturing["now"] = False
    assert torch.equal(dispatch.matmul(a, b), torch.matmul(a, b))


def test_the_dispatchers_host_overhead_is_measured_and_small_on_the_cpu_path():
    dispatch.use_table(Table(), retrieval=False)
    a, b = torch.randn(4, 8, dtype=torch.float16), torch.randn(8, 4, dtype=torch.float16)
    cost = dispatch.host_overhead(a, b, calls=300)
    assert 0 < cost.route_us < 25  # a tuple, a dict lookup: microseconds even on a busy core
    assert cost.extra_us < 25 and cost.to_json()["calls"] == 300
    assert dispatch.active().decisions == 1


@pytest.mark.slow
def test_the_operator_works_under_torch_compile_through_its_fake():
    dispatch.use_table(Table(), retrieval=False)
    a, b = torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 4, dtype=torch.float16)

    def model(x, y):
        return dispatch.matmul(x, y).float() * 2

    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(a, b), model(a, b))
    torch.library.opcheck(torch.ops.solforge.hgemm.default, (a, b))
    out = torch.empty(8, 4, dtype=torch.float16)
    torch.library.opcheck(torch.ops.solforge.hgemm_out.default, (a, b, out))

    def into(x, y, z):
        dispatch.matmul(x, y, out=z)
        return z * 1

    compiled_into = torch.compile(into, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled_into(a, b, out), torch.matmul(a, b))


# -- the benchmark summary ---------------------------------------------------------------------

def row(shape: Shape, dispatch_ms: float, torch_ms: float) -> BenchRow:
    timings = {"kernel": {"dispatch": dispatch_ms, "torch": torch_ms,
                          "cublaslt_autotuned": torch_ms},
               "graph": {"dispatch": dispatch_ms, "torch": torch_ms},
               "events": {"dispatch": dispatch_ms, "torch": torch_ms}}
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
    (bandwidth,) = summary["decode_hbm_fraction"]  # the 1x4096x4096 weight: 32 MB, 1 ms
    assert bandwidth["dispatch"] == pytest.approx(2 * (4096 + 4096**2 + 4096) / 1e-3 / 4.8e12)
    assert summary["goal"]["decode_large_weight_at_90_percent_hbm"] == 0  # 1 ms is far off
    assert speedups([("a", math.nan)], 0.02).shapes == 0
    assert summary["goal"]["slower_than_fixed_noise"]["offline"]["kernel"] == 1


def test_the_summary_dates_span_the_calls_that_measured_its_rows():
    first, last = (replace(row(Shape(64, 64, 64 * n), 1.0, 1.0),
                           environment={"gpu": "NVIDIA H200", "date": date})
                   for n, date in ((1, "2026-12-02T00:38"), (2, "2026-12-01T16:24")))
    summary = summarize_bench([first, last], Table())
    assert summary["environment"]["date"] == "2026-12-01T16:24"
    assert summary["environment"]["last_date"] == "2026-12-02T00:38"
    assert "date 2026-12-01T16:24, last_date 2026-12-02T00:38" in markdown(summary, [first, last])


def test_slower_beyond_noise_allows_for_the_scatter_each_run_measured():
    shape = Shape(1, 4096, 4096, "bfloat16", "nt")
    times = {"kernel": {"dispatch": 1.05, "torch": 1.0}, "graph": {"dispatch": 1.05,
                                                                  "torch": 1.0}}
    spreads = {"kernel": {"dispatch": 0.01, "torch": 0.01}, "graph": {"dispatch": 0.4,
                                                                     "torch": 0.4}}
    noisy = BenchRow(shape, "x", {}, {"offline": times}, spreads={"offline": spreads},
                     rounds=8)
    assert noisy.noise("torch", "offline", "kernel", 0.02) == 0.02  # tight: the floor
    band = noisy.noise("torch", "offline", "graph", 0.02)
    assert band == pytest.approx(2 * 1.2533 * math.hypot(0.4, 0.4) / 2.563 / math.sqrt(8))
    summary = summarize_bench([noisy], Table())
    offline = summary["dispatch_speedup"]["torch"]["offline"]
    assert offline["kernel"]["below_noise"] == 1  # 5% slower, measured tightly: a loss
    assert offline["graph"]["below_noise"] == 0  # 5% inside a 17% scatter band: not shown
    assert offline["graph"]["below_fixed_noise"] == 1  # but kept in the plain count
    assert BenchRow.from_json(noisy.to_json()) == noisy


def test_small_shapes_are_timed_with_more_rounds():
    """Microsecond kernels get `small_rounds` (their medians scatter most, their calls are
    cheap); large ones keep `rounds`, and the time estimate counts the same calls."""
    settings = BenchSettings(rounds=8, small_rounds=32)
    small, large = Shape(1, 4096, 4096, "bfloat16", "nt"), Shape(8192, 8192, 8192)
    assert rounds_for(small, settings) == 32 and rounds_for(large, settings) == 8
    assert rounds_for(small, BenchSettings(rounds=64, small_rounds=32)) == 64  # never fewer
    fewer = estimate_seconds(small, BenchSettings(rounds=8, small_rounds=0))
    assert estimate_seconds(small, settings) > fewer


def test_losses_are_also_counted_where_a_tuned_kernel_ran_and_identical_kernels_give_scatter():
    """Where the dispatcher ran torch.matmul (both columns the same kernel) a "loss" is the
    benchmark's own scatter: reported as such, and left out of the tuned shapes' count."""
    same_kernel = row(Shape(64, 64, 64), 1.04, 1.0)  # 4% apart, one kernel timed twice
    same_kernel = BenchRow(same_kernel.shape, "torch.matmul", same_kernel.errors,
                           same_kernel.times, ("in CUDA graphs: torch.matmul",))
    tuned_loss = BenchRow(Shape(1, 4096, 4096, "bfloat16", "nt"), "triton:gemv", {},
                          row(Shape(1, 4096, 4096), 1.1, 1.0).times,
                          ("in CUDA graphs: torch.matmul",))  # eager tuned, graphs not
    summary = summarize_bench([same_kernel, tuned_loss], Table())
    goal = summary["goal"]
    assert goal["slower_beyond_noise"]["offline"] == {"kernel": 2, "graph": 2, "events": 2}
    assert goal["tuned_shapes_slower_beyond_noise"]["offline"] == {"kernel": 1, "graph": 0,
                                                                   "events": 1}
    scatter = summary["identical_kernel_scatter"]["offline"]
    assert scatter["kernel"]["shapes"] == 1 and scatter["graph"]["shapes"] == 2
    assert scatter["kernel"]["median"] == pytest.approx(1 - 1.0 / 1.04)
    assert "the benchmark's resolution" in markdown(summary, [same_kernel, tuned_loss])


def test_a_timing_the_tuned_kernel_lost_beyond_noise_goes_to_torch_matmul():
    """Never slower: where the benchmark timed the table's tuned kernel slower than
    torch.matmul beyond noise, in one mode or the other, that timing's choice is demoted (here
    captures: an H200 benchmark found 4 such shapes); a loss within noise, a shape the table
    sends to torch.matmul, and a row that timed older choices change nothing."""
    shape, within, torch_only, stale = (Shape(512, 128, 4096), Shape(1024, 256, 256),
                                        Shape(64, 64, 64), Shape(4096, 64, 512))
    table = Table()
    for each in (shape, within, torch_only, stale):
        best = shortlist(each)[0]
        tuned = each != torch_only
        table.add(TableEntry(each, best, tuned, {"torch": MethodTimes(1.0, 1.0)},
                             use_in_graph=tuned))

    def timed(each: Shape, graph_ms: float, label: str | None = None) -> BenchRow:
        label = label or table.get(each).best.label
        times = {"kernel": {"dispatch": 1.0, "torch": 1.0},
                 "graph": {"dispatch": graph_ms, "torch": 1.0}}
        return BenchRow(each, label, {}, {"offline": times, "server": times},
                        (f"in CUDA graphs: {label}",))

    rows = [timed(shape, 1.16), timed(within, 1.01),
            timed(torch_only, 1.16, "torch.matmul"), timed(stale, 1.16, "triton:old")]
    [demoted] = demotions(rows, table)
    assert demoted.shape == shape and demoted.use_kernel and not demoted.use_in_graph
    assert "graph: torch.matmul" in demoted.notes[-1] and "offline 0.862x" in demoted.notes[-1]
    table.add(demoted)
    assert demotions(rows, table) == []  # its row timed the old choice: benchmarked again


def test_an_eager_kernel_that_loses_end_to_end_goes_to_torch_matmul():
    """A tuned kernel faster on the GPU but slower with its host launch cost (events: one call
    between two synchronizes) loses eager calls to torch.matmul; graph replays, which have no
    per-kernel host cost, keep it."""
    shape = Shape(1, 4096, 4096, "bfloat16", "nt")
    table = Table()
    table.add(TableEntry(shape, shortlist(shape)[0], True, {"torch": MethodTimes(1.0, 1.0)},
                         use_in_graph=True))
    label = table.get(shape).best.label
    times = {"kernel": {"dispatch": 0.010, "torch": 0.0128},
             "graph": {"dispatch": 0.011, "torch": 0.0128},
             "events": {"dispatch": 0.071, "torch": 0.049}}  # 55 us of host against 30
    row_ = BenchRow(shape, label, {}, {"offline": times, "server": times},
                    (f"in CUDA graphs: {label}",))
    [demoted] = demotions([row_], table)
    assert not demoted.use_kernel and demoted.use_in_graph
    assert "events: torch.matmul" in demoted.notes[-1]


def test_the_gap_probe_times_the_same_call_with_and_without_a_host_delay(tmp_path):
    """benchmarks/hgemm_gap_probe.py in CPU mode (its numbers mean nothing there): every
    callable timed at each shape, each ratio against torch.matmul recorded."""
    spec = importlib.util.spec_from_file_location(
        "hgemm_gap_probe", Path(__file__).resolve().parents[2] / "benchmarks" /
        "hgemm_gap_probe.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "gap.json"
    assert script.main(["--device", "cpu", "--rounds", "2", "--shapes", "8x8x8",
                        "4x16x32:bfloat16:nt", "-o", str(out)]) == 0
    shapes = json.loads(out.read_text())["shapes"]
    assert set(shapes) == {"float16:nn:fp32:8x8x8", "bfloat16:nt:fp32:4x16x32"}
    for found in shapes.values():
        assert set(found["ratio_to_torch"]) == {"torch", "torch_again", "dispatch",
                                                "torch_after_10us", "torch_after_30us",
                                                "torch_after_100us"}
        assert found["failed"] == {} and found["ratio_to_torch"]["torch"] == 1.0
        # on the host the spin is inside the timed call: each delayed call takes its delay
        for delay in (10, 30, 100):
            assert found["median_us"][f"torch_after_{delay}us"] >= delay


def test_the_launch_settings_are_made_once_per_config_and_grids_count_as_before():
    """The hot path's host work: a config's settings merged once (the same dict each call,
    its variant's fixed settings included), and the host ceiling division triton.cdiv's."""
    from solforge.hgemm.kernels import settings
    from solforge.hgemm.kernels.blocks import ceil_div

    config = Config.of("persistent", BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8,
                       NUM_STAGES=2, NUM_WARPS=4, ACC_FP16=0)
    assert settings(config) is settings(config)
    assert settings(config)["PERSISTENT"] == 1 and settings(config)["BLOCK_M"] == 64
    assert all(ceil_div(a, b) == triton.cdiv(a, b) for a in range(1, 300) for b in (1, 7, 64))


def test_the_launch_host_script_times_every_variant(tmp_path):
    """benchmarks/hgemm_launch_host.py (in its own process: it stubs the kernels)."""
    out = tmp_path / "launch.json"
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] /
                                                "benchmarks" / "hgemm_launch_host.py"),
                           "--calls", "20", "-o", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert "launch_us" not in record  # no real launch on the CPU
    found = record["python_us"]
    assert set(found) == {"tiled", "persistent", "tma", "tma_persistent", "splitk", "gemv"}
    assert all(value > 0 for value in found.values())


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
        for (block_m, block_n), stages in itertools.product(wgmma.TILES, wgmma.STAGES):
            config = Config.of("wgmma", BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=stages,
                               GROUP_M=stages // 2)  # 1, 2, 3: ragged tile groups as well
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
    table.add(TableEntry(shape, config, False, {}, use_in_graph=True))  # won in graphs only
    dispatch.use_table(table, retrieval=False)
    operands = random_operands(shape, torch.device("cuda"))
    a, b = operands.a, operands.b
    assert dispatch.active().choose(a, b, mode=dispatch.GRAPH) == config
    assert dispatch.active().route(a, b) is None  # eager: torch.matmul
    graph = torch.cuda.CUDAGraph()
    dispatch.matmul(a, b)  # warm-up outside the capture
    with torch.cuda.graph(graph):
        routed = dispatch.active().route(a, b)
        captured = dispatch.matmul(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert routed == config
    assert relative_error(captured, operands.reference) <= tolerance(shape)
    cost = dispatch.host_overhead(a, b, calls=500)
    assert cost.route_us < 10 and cost.extra_us < 15  # microseconds a call on the host
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


def load_script():
    spec = importlib.util.spec_from_file_location("hgemm_gpu", REPO / "benchmarks" /
                                                  "hgemm_gpu.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


FAST_BENCH = BenchSettings(rounds=2, modes=("offline", "server"), server_gap_ms=0.0,
                           small_rounds=0)


@pytest.mark.slow
def test_the_gpu_scripts_pass_tunes_benchmarks_resumes_and_reports(tmp_path):
    script = load_script()
    run = script.Run(tmp_path)
    shapes = TINY[:3]
    script.run_pass(run, shapes[:2], 1e9, FakeMeasurer(), 4, QUICK, FAST_BENCH)
    script.run_pass(run, shapes, 1e9, FakeMeasurer(), 4, QUICK, FAST_BENCH)
    assert len(load_table(run.table)) == 3
    rows = [json.loads(line) for line in run.rows.read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == sorted(s.key for s in shapes)  # each shape once
    probes = [json.loads(line)["key"] for line in run.probes.read_text().splitlines()]
    assert sorted(probes) == sorted(s.key for s in shapes)  # each probed once, then kept
    # a row timed in an earlier order is timed again by the next pass
    run.rows.write_text("".join(json.dumps({**r, "order": "fixed"} if r["key"] == shapes[0].key
                                           else r) + "\n" for r in rows))
    script.run_pass(run, shapes, 1e9, FakeMeasurer(), 4, QUICK, FAST_BENCH)
    again = [json.loads(line)["key"] for line in run.rows.read_text().splitlines()]
    assert again[3:] == [shapes[0].key]
    script.write_report(run)
    summary = json.loads(run.summary.with_suffix(".json").read_text())
    assert summary["shapes"] == 3
    assert summary["dispatch_speedup"]["torch"]["server"]["graph"]["shapes"] == 3
    assert summary["goal"]["slower_beyond_noise"]["server"]["graph"] == 0
    run.summary.with_suffix(".json").unlink()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "hgemm_gpu.py"),
                           str(tmp_path), "--stage", "report"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(run.summary.with_suffix(".json").read_text())["shapes"] == 3
    shipped = load_table(run.shipped)  # what src/solforge/hgemm/tables/ would ship
    assert len(shipped) == 3 and all(e.candidates == () for e in shipped)
    assert [e.use_kernel for e in shipped] == [e.use_kernel for e in load_table(run.table)]


def test_a_row_timed_with_fewer_rounds_than_asked_is_measured_again(tmp_path):
    from solforge.hgemm.bench import bench

    shapes = TINY[:2]
    rows_path = tmp_path / "bench.jsonl"
    bench(shapes, rows_path, FakeMeasurer(), FAST_BENCH)
    bench(shapes, rows_path, FakeMeasurer(), FAST_BENCH)  # all there: nothing again
    assert len(rows_path.read_text().splitlines()) == 2
    bench(shapes, rows_path, FakeMeasurer(), replace(FAST_BENCH, small_rounds=3))
    assert len(rows_path.read_text().splitlines()) == 4
    assert [row.rounds for row in load_rows(rows_path)] == [3, 3]  # the new rows count
    assert {row.order for row in load_rows(rows_path)} == {"balanced"}
    earlier = [json.dumps({**json.loads(line), "order": "rotated"})
               for line in rows_path.read_text().splitlines()[-2:]]
    rows_path.write_text("\n".join(earlier) + "\n")  # timed in the order rows had before
    bench(shapes, rows_path, FakeMeasurer(), replace(FAST_BENCH, small_rounds=3))
    assert [row.order for row in load_rows(rows_path)] == ["balanced", "balanced"]
    assert len(rows_path.read_text().splitlines()) == 4


def test_end_to_end_is_timed_in_server_mode_where_eager_calls_run_a_tuned_kernel():
    """Events timing decides eager calls only: it is spent where the dispatcher runs a tuned
    kernel eagerly, in server mode (offline it would differ only by the gaps)."""
    from solforge.hgemm.bench import _timed

    class Methods(FakeMeasurer):
        """Records (timing, spaced) of each timing run."""

        def time(self, calls, method, rounds, gap_s=None):
            self.timed.append((method, gap_s is not None))
            return {name: fake_timing(self.ms(name), rounds) for name in calls}

    calls = {"dispatch": lambda: None, "torch": lambda: None}
    for eager_tuned, expected in ((True, {("events", True)}), (False, set())):
        measurer = Methods()
        times, _, _ = _timed(calls, measurer, FAST_BENCH, eager_tuned)
        assert {entry for entry in measurer.timed if entry[0] == "events"} == expected
        assert len(measurer.timed) == 4 + len(expected)  # kernel and graph, both modes
        assert ("events" in times["server"]) is eager_tuned and "events" not in times["offline"]


def test_a_row_timed_before_its_shape_was_tuned_again_is_measured_again(tmp_path):
    """A later call that tunes a shape again changes its choice; its old row timed another
    kernel (on the H200, 53 of 1,110 rows timed torch.matmul where the table now runs a tuned
    kernel), so the summary counts it stale and the next benchmark times it again."""
    from solforge.hgemm.bench import bench, stale_rows

    shape, rows_path = TINY[0], tmp_path / "bench.jsonl"
    config = next(c for c in shortlist(shape) if c.kernel == "tiled")
    table = Table()
    table.add(TableEntry(shape, config, True, {}, use_in_graph=False))
    graph_note = ("in CUDA graphs: torch.matmul",)
    old = replace(row(shape, 1.0, 1.0), choice="torch.matmul", notes=graph_note)
    new = replace(old, choice=config.label)
    assert stale_rows([old], table) == [shape.key] and stale_rows([new], table) == []
    assert summarize_bench([old], table)["stale_rows"]["count"] == 1
    assert summarize_bench([new], table)["stale_rows"]["count"] == 0
    assert summarize_bench([old], table)["earlier_order_rows"] == 1  # row(): a "fixed" one
    # the resume: CPU tensors run torch.matmul, so here a row that names the kernel is stale
    dispatch.use_table(table, retrieval=False)
    rows_path.write_text(json.dumps(replace(new, rounds=99).to_json()) + "\n")
    bench([shape], rows_path, FakeMeasurer(), FAST_BENCH)
    bench([shape], rows_path, FakeMeasurer(), FAST_BENCH)  # current now: not again
    assert len(rows_path.read_text().splitlines()) == 2
    (again,) = load_rows(rows_path)
    assert (again.choice, again.graph_choice) == ("torch.matmul", "torch.matmul")


def test_the_pass_spends_its_tuning_share_then_benchmarks_untuned_shapes(tmp_path):
    script = load_script()
    run = script.Run(tmp_path)
    run.elapsed = lambda: 0.0
    script.REPORT_RESERVE_S = 0.0
    # a clock that moves one second a reading: each shape takes about its estimate (~1 s), so
    # a tuning share of 3 s holds one shape, and the 10 s left then benchmark the rest
    script.run_pass(run, TINY, 10.0, FakeMeasurer(), 4, QUICK, FAST_BENCH, tune_share=0.3,
                    clock=FakeClock(1.0))
    table, rows = load_table(run.table), load_rows(run.rows)
    assert len(table) == 1  # the tuning share ran out
    assert len(rows) == len(TINY)  # the rest benchmarked untuned, through torch.matmul
    assert all(r.choice == "torch.matmul" for r in rows if table.get(r.shape) is None)


class ExplodingError(Exception):
    """Stands for cuda.core's CUDAError: not a RuntimeError."""


class ExplodingPlan:
    def execute(self) -> None:
        return None

    def free(self) -> None:
        raise ExplodingError("CUDA_ERROR_INVALID_VALUE")


def test_a_baseline_that_fails_on_one_shape_is_recorded_for_that_shape_and_the_run_goes_on(
        tmp_path, monkeypatch):
    script = load_script()
    bad = TINY[1]

    def baselines_with_a_bad_one(operands, names=(), autotune_iterations=5):
        found = make_baselines(operands, ("torch",))
        out = torch.empty_like(found.baselines["torch"].out)
        failing = operands.a.shape[0] == bad.m and out.shape[1] == bad.n

        def call() -> None:
            if failing:
                raise ExplodingError("cuBLASLt refused the shape")
            torch.matmul(operands.a, operands.b, out=out)

        found.baselines["cublaslt_autotuned"] = Baseline(call, out)
        found._plans.append(("cublaslt_autotuned", ExplodingPlan()))  # free() raises
        return found

    monkeypatch.setattr(script, "make_baselines", baselines_with_a_bad_one)
    run = script.Run(tmp_path)
    script.run_pass(run, TINY[:3], 1e9, FakeMeasurer(), 4, QUICK, FAST_BENCH)
    table, rows = load_table(run.table), {r.shape.key: r for r in load_rows(run.rows)}
    assert len(table) == 3 and len(rows) == 3  # every shape tuned and benchmarked
    failed = table.get(bad)
    assert failed.times["cublaslt_autotuned"].kernel_ms is None
    assert any("cublaslt_autotuned failed at this shape: ExplodingError" in n
               for n in failed.notes)
    log = (tmp_path / "h200-hgemm-log.txt").read_text()
    assert log.count("could not be freed") == 3  # close() logged it, never raised
    assert rows[bad.key].time("cublaslt_autotuned") is None
    assert rows[bad.key].time("dispatch") is not None
    good = table.get(TINY[0])
    assert good.time("cublaslt_autotuned") is not None


def test_release_frees_after_an_eager_execute_and_never_raises():
    calls = []

    class Plan:
        def execute(self) -> None:
            calls.append("execute")

        def free(self) -> None:
            calls.append("free")

    assert release(Plan()) is None and calls == ["execute", "free"]
    assert "could not be freed" in release(ExplodingPlan())


# -- the roofline and the per-mode rule --------------------------------------------------------

def test_the_roofline_floor_is_flops_or_bytes_at_the_profiles_peaks():
    roof = roof_for("NVIDIA H200")
    assert roof.tensor_flops == pytest.approx(989.4e12) and roof.dram_bytes_per_s == 4.8e12
    cube = Shape(8192, 8192, 8192)
    assert floor_seconds(cube, roof) == pytest.approx(2 * 8192**3 / 989.4e12)
    decode = Shape(1, 4096, 4096, "bfloat16", "nt")
    assert floor_seconds(decode, roof) == pytest.approx(2 * (4096 + 4096**2 + 4096) / 4.8e12)
    assert headroom(decode, 2 * floor_seconds(decode, roof), roof) == pytest.approx(1.0)
    assert candidates_for(0.01, 12) == 0 and candidates_for(0.1, 12) == 2
    assert candidates_for(0.25, 12) == 6 and candidates_for(3.0, 12) == 12
    order = plan_order(TINY[:3], {TINY[0].key: 0.1, TINY[2].key: 2.0}, lambda s: 1.0)
    assert order == [TINY[2], TINY[0], TINY[1]]  # most headroom first; unprobed last


def test_a_shape_where_cublas_is_at_the_roofline_is_not_searched(tmp_path):
    shape = TINY[0]
    at_floor_ms = floor_seconds(shape, roof_for(None)) * 1e3 * 1.01
    table_path = tmp_path / "table.jsonl"
    tune([shape], table_path, FakeMeasurer(torch_ms=at_floor_ms), QUICK, sm_count=4)
    entry = load_table(table_path).get(shape)
    assert entry.best is None and not entry.use_kernel and entry.candidates == ()
    assert any("0 candidates" in note for note in entry.notes)


def test_each_mode_uses_the_kernel_only_where_it_won_beyond_noise_in_that_mode():
    torch_times = MethodTimes(1.0, 1.0, server_kernel_ms=1.0, server_graph_ms=1.0,
                              server_events_ms=1.0)
    graph_loses = MethodTimes(0.9, 1.01, server_kernel_ms=0.9, server_graph_ms=0.9,
                              server_events_ms=0.9)
    assert mode_choices(graph_loses, torch_times, 0.02) == (True, False)
    server_loses = MethodTimes(0.9, 0.9, server_kernel_ms=0.99, server_graph_ms=0.9,
                               server_events_ms=0.9)
    assert mode_choices(server_loses, torch_times, 0.02) == (False, True)
    unmeasured = MethodTimes(0.9, 0.9)
    assert mode_choices(unmeasured, torch_times, 0.02) == (False, False)
    # faster on the GPU, slower with the host's launch: eager calls stay on torch.matmul
    host_bound = replace(graph_loses, graph_ms=0.9, server_events_ms=1.03)
    assert mode_choices(host_bound, torch_times, 0.02) == (False, True)


def test_hgemm_show_says_what_each_mode_runs(tmp_path):
    from typer.testing import CliRunner

    from solforge.cli import app

    table_path = tmp_path / "table.jsonl"
    config = dot("tiled", 64, 64, 64)
    append_entry(table_path, TableEntry(Shape(64, 64, 64), config, True, {},
                                        use_in_graph=False))
    result = CliRunner().invoke(app, ["hgemm", "show", "--table", str(table_path)])
    assert result.exit_code == 0, result.output
    assert "runs in CUDA graphs" in result.output and "torch.matmul" in result.output
    assert load_table(table_path).get(Shape(64, 64, 64)).use_in_graph is False


def test_the_gpu_script_plans_a_call_without_a_gpu():
    script = load_script()
    lines = script.plan(select_shapes(["grid", "decode"]), 450.0, 0.75)
    assert lines[0].startswith("plan: grid: 1000 shapes") and "decode: 66 shapes" in lines[1]
    assert "Triton kernel sets to precompile" in lines[-1] and "450 s" in lines[-1]


def test_interleaved_timing_gives_no_callable_a_place_of_its_own(monkeypatch):
    """Three callables timed side by side where the first place of every round costs 2 ms and
    the others 1 ms (whatever runs there): turning the order each round gives each callable
    every place once per three rounds, so all three read alike (fixed order: 2, 1 and 1)."""
    ran: list[str] = []

    def fake_time_iterations(run, iterations, warmup, method, before_iteration=None):
        for i in range(warmup + iterations):
            run(i)
        places = [i % 3 for i in range(warmup, warmup + iterations)]
        return summarize(method, [2.0 if place == 0 else 1.0 for place in places])

    monkeypatch.setattr(measure, "time_iterations", fake_time_iterations)
    calls = {name: (lambda name=name: ran.append(name)) for name in "abc"}
    timed = measure.time_interleaved(calls, "kernel", rounds=6, warmup_rounds=1)
    assert {name: timing.times_ms.count(2.0) for name, timing in timed.items()} == \
        {"a": 2, "b": 2, "c": 2}
    assert ran.count("a") == ran.count("b") == ran.count("c") == 7  # warm-up round included
    assert measure.interleaved_order(3, 2) == [0, 1, 2, 1, 2, 0]


def test_interleaved_timing_puts_each_callable_after_each_other_equally_often():
    """The H200's rotated order always put torch.matmul right after the dispatcher (the same
    kernel, for most shapes) and read it faster: each callable now follows each other one
    equally often within rounds, and takes each place equally often."""
    for count in range(2, 7):
        rows = measure.balanced_rounds(count)
        assert all(sorted(row) == list(range(count)) for row in rows)
        follows = Counter((row[i], row[i + 1]) for row in rows for i in range(count - 1))
        assert len(follows) == count * (count - 1) and len(set(follows.values())) == 1
        places = Counter((place, index) for row in rows for place, index in enumerate(row))
        assert len(places) == count * count and len(set(places.values())) == 1
    order = measure.interleaved_order(4, 8)
    before_torch = Counter(order[i - 1] for i in range(1, len(order)) if order[i] == 1)
    assert before_torch[0] < sum(before_torch.values()) / 2  # the dispatcher no longer always
