"""The split-K GEMM template: it claims the Llama-70B projections whose decode workloads leave
SMs idle, refuses settings it cannot run, and its rendered kernel matches the reference on the
CPU (Triton's interpreter) whether K splits evenly, unevenly or, with the SMs full, not at all."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from helpers import FIXTURES, write_problem

from solforge import tiling
from solforge.data.solution import parse_solution
from solforge.data.trace import Status
from solforge.forge.templates import template_named, templates_for
from solforge.forge.templates.template import set_constants
from solforge.harness import EvalConfig, evaluate
from solforge.problem.inputs import make_inputs
from solforge.problem.problem import Problem, load_problem
from solforge.problem.reference import reference_run
from solforge.problem.suite import open_problem

TEMPLATE = template_named("gemm_split_k")
RAGGED = FIXTURES / "templates" / "linear_bias_silu_ragged"  # bf16, bias, SiLU; K = 96
SETTING = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2, "NUM_STAGES": 2,
           "NUM_WARPS": 4}
LLAMA_70B = ("l1/gemm_llama3_1_70b_down", "l1/gemm_llama3_1_70b_gate_up")


def _linear(name: str, dtype: str, k: int, bias: bool, reference: str) -> dict[str, Any]:
    """A small nn.Linear problem: x [M, K] (M a var axis), weight [N = 40, K], bias [N]."""
    inputs = {"x": {"shape": ["M", "K"], "dtype": dtype},
              "weight": {"shape": ["N", "K"], "dtype": dtype}}
    if bias:
        inputs["bias"] = {"shape": ["N"], "dtype": dtype}
    parameters = ", ".join(inputs)
    return {"name": name, "op_type": "gemm",
            "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 40},
                     "K": {"type": "const", "value": k}},
            "inputs": inputs, "outputs": {"out": {"shape": ["M", "N"], "dtype": dtype}},
            "reference": (f"import torch\nimport torch.nn.functional as F\n\n\n"
                          f"def run({parameters}):\n    return {reference}\n")}


# name -> (definition, settings): each a dtype, bias and epilogue, and a way K is split.
LINEARS = {
    # 8 BLOCK_K steps over 8 splits: one step each. gelu (erf) on the float32 product.
    "fp16 gelu, even split": (
        _linear("fp16_gelu", "float16", 256, False,
                "F.gelu(x.float() @ weight.float().T).half()"),
        {**SETTING, "SPLIT_K": 8}),
    # 6 steps over 4 splits (1, 2, 1, 2): K / SPLIT_K = 48 is not a multiple of BLOCK_K = 32.
    "bf16 bias, uneven split": (
        _linear("bf16_bias", "bfloat16", 192, True, "F.linear(x, weight, bias)"),
        {**SETTING, "SPLIT_K": 4}),
}


def _load(source: str, folder: Path) -> ModuleType:
    """The rendered kernel as a module (Triton's JIT reads the source back from its file)."""
    path = folder / f"split_k_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


class _Grids:
    """A kernel handle that records the grid of each launch, then launches."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.grids: list[tuple[int, ...]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        self.grids.append(grid)
        return self.kernel[grid]


def _run_against_reference(problem: Problem, source: str, rows: int,
                           folder: Path) -> tuple[_Grids, _Grids]:
    """Run the rendered kernel on M = `rows` and compare with the reference at the default
    tolerance (atol = rtol = 1e-2); returns the two launches' grid records."""
    module = _load(source, folder)
    module._partials, module._sum_splits = _Grids(module._partials), _Grids(module._sum_splits)
    workload = next(w for w in problem.workloads if problem.axes(w)["M"] == rows)
    inputs = make_inputs(problem, workload)
    expected = reference_run(problem.definition)(**inputs)
    out = torch.empty_like(expected)
    module.run(**inputs, out=out)
    torch.testing.assert_close(out.float(), expected.float(), atol=1e-2, rtol=1e-2)
    return module._partials, module._sum_splits


@pytest.fixture(scope="module")
def linears(tmp_path_factory) -> dict[str, Problem]:
    root = tmp_path_factory.mktemp("linears")
    return {label: load_problem(write_problem(root / definition["name"], definition,
                                              [{"axes": {"M": 5}}, {"axes": {"M": 19}}]))
            for label, (definition, _) in LINEARS.items()}


@pytest.mark.parametrize("label", list(LINEARS))
def test_rendered_split_k_matches_the_reference(linears, label, tmp_path):
    problem, params = linears[label], LINEARS[label][1]
    assert TEMPLATE.invalid_reason(params, problem) is None
    partials, sums = _run_against_reference(problem, TEMPLATE.render(params, problem)
                                            ["sources"][0]["content"], 19, tmp_path)
    # 2 x 2 tiles of 16 x 32, each cut into SPLIT_K programs, then one launch of the sum.
    assert partials.grids == [(4, params["SPLIT_K"])] and sums.grids == [(1,)]


def test_with_the_sms_full_one_split_stores_out_directly(linears, tmp_path):
    """Where the tiles fill the SMs (here: a GPU of one SM) K is not split: no workspace, no
    sum, the epilogue in the GEMM's programs."""
    problem, params = linears["fp16 gelu, even split"], LINEARS["fp16 gelu, even split"][1]
    source = set_constants(TEMPLATE.render(params, problem)["sources"][0]["content"],
                           {"CPU_SM_COUNT": 1})
    partials, sums = _run_against_reference(problem, source, 5, tmp_path)
    assert partials.grids == [(2, 1)] and sums.grids == []


def test_rendered_split_k_passes_the_harness_on_the_cpu(tmp_path):
    """bf16, bias and SiLU on a pre-activation rounded to bf16, ragged M and N; K = 96 is 3
    BLOCK_K steps over 2 splits (1 and 2)."""
    problem = load_problem(RAGGED)
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, warmup=1, iterations=2,
                        verify=1, secret=20251129, cache_dir=tmp_path)
    solution = TEMPLATE.render(SETTING, problem)
    assert 'ACTIVATION = "silu"' in solution["sources"][0]["content"]
    traces = evaluate(problem, parse_solution(solution), config)
    assert [trace.evaluation.status for trace in traces] == [Status.PASSED], \
        traces[0].evaluation.log


@pytest.mark.parametrize("address", LLAMA_70B)
def test_split_k_applies_to_the_llama_70b_projections(address):
    problem = open_problem(address)
    assert TEMPLATE in templates_for(problem.definition)
    # The M = 16, N = 128 decode tile over K = 28672: 64 splits of 7 steps of BLOCK_K = 64.
    decode = {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 64, "NUM_STAGES": 4,
              "NUM_WARPS": 4}
    assert TEMPLATE.invalid_reason(decode, problem) is None


@pytest.mark.parametrize(("address", "params", "phrase"), [
    (RAGGED, {"BLOCK_K": 64}, "K=96 is not a multiple of BLOCK_K=64"),
    (RAGGED, {"SPLIT_K": 4},
     "SPLIT_K=4 leaves a split without a BLOCK_K step (K=96 is 3 steps of BLOCK_K=32)"),
    ("l1/gemm_llama3_1_70b_down", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128,
                                   "NUM_STAGES": 5}, "shared memory"),
])
def test_valid_names_what_a_split_k_setting_breaks(address, params, phrase):
    problem = load_problem(address) if isinstance(address, Path) else open_problem(address)
    reason = TEMPLATE.invalid_reason({**SETTING, **params}, problem)
    assert reason is not None and phrase in reason


def test_a_problem_whose_tiles_always_fill_the_gpu_is_refused(make_problem):
    """M = 256, N = 1056 is 16 x 33 = 528 tiles of 16 x 32, four per SM: never split."""
    definition = _linear("wide", "float16", 64, False, "x @ weight.T")
    definition["axes"]["N"]["value"] = 1056
    problem = load_problem(make_problem(definition, [{"axes": {"M": 256}}]))
    reason = TEMPLATE.invalid_reason(SETTING, problem)
    assert reason is not None and "every workload has at least 528 tiles of 16x32" in reason
    assert TEMPLATE.invalid_reason({**SETTING, "BLOCK_M": 64, "BLOCK_N": 128}, problem) is None


def test_kernel_carries_the_shared_tile_order_verbatim():
    from solforge.forge.templates import kernels

    shared = inspect.getsource(tiling.tile_coordinates.fn)
    source = (Path(kernels.__file__).parent / "gemm_split_k.py").read_text()
    assert shared.replace("def tile_coordinates(", "def _tile_coordinates(") in source
