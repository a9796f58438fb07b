"""The FlashInfer-Trace / SOL-ExecBench problem format: loading, validation, inputs, `check`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from solforge.errors import ProblemError
from solforge.problem import load_problem, make_inputs
from solforge.problem.check import check_problem
from solforge.problem.inputs import pack_fp4, unpack_fp4

RMSNORM_REFERENCE = """import torch

@torch.no_grad()
def run(hidden_states, weight, eps):
    x = hidden_states.to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return ((x * inv_rms) * weight.to(torch.float32)).to(hidden_states.dtype)
"""


def rmsnorm_definition(**changes) -> dict:
    """Written the way SOL-ExecBench writes its files: nulls for absent descriptions."""
    definition = {
        "name": "rmsnorm_h64",
        "op_type": "rmsnorm",
        "axes": {
            "batch_size": {"type": "var", "description": None},
            "hidden_size": {"type": "const", "value": 64, "description": None},
        },
        "custom_inputs_entrypoint": None,
        "inputs": {
            "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16",
                              "description": None},
            "weight": {"shape": ["hidden_size"], "dtype": "bfloat16", "description": None},
            "eps": {"shape": None, "dtype": "float32"},
        },
        "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16",
                               "description": None}},
        "reference": RMSNORM_REFERENCE,
        "description": "RMSNorm captured from a model.",
    }
    definition.update(changes)
    return definition


def rmsnorm_workload(batch: int, uuid: str = "w0") -> dict:
    return {"uuid": uuid, "axes": {"batch_size": batch},
            "inputs": {"hidden_states": {"type": "random"}, "weight": {"type": "random"},
                       "eps": {"type": "scalar", "value": 1e-5}}}


def test_sol_execbench_style_files_load_and_round_trip(make_problem):
    definition = rmsnorm_definition()
    folder = make_problem(definition, [rmsnorm_workload(4), rmsnorm_workload(7, "w1")])
    problem = load_problem(folder)
    assert [w.uuid for w in problem.workloads] == ["w0", "w1"]
    assert problem.definition.inputs["eps"].is_scalar
    assert problem.axes(problem.workloads[1]) == {"batch_size": 7, "hidden_size": 64}
    saved = problem.definition.to_dict()
    assert saved["reference"] == definition["reference"]
    assert saved["inputs"]["weight"] == {"shape": ["hidden_size"], "dtype": "bfloat16"}


def test_flashinfer_trace_workload_lines_load(make_problem):
    wrapped = {"definition": "rmsnorm_h64", "solution": None, "evaluation": None,
               "workload": rmsnorm_workload(3, "abc")}
    folder = make_problem(rmsnorm_definition(), [wrapped])
    assert load_problem(folder).workloads[0].axes == {"batch_size": 3}


def test_expression_axes_and_constraints(make_problem):
    definition = {
        "name": "gqa", "op_type": "attention",
        "axes": {"H_qo": {"type": "var"}, "H_kv": {"type": "var"},
                 "G": {"type": "expr", "expression": "H_qo // H_kv"},
                 "S": {"type": "var"}, "T": {"type": "expr", "expression": "S * G + 1"}},
        "constraints": ["H_qo == H_kv * G", "H_qo % H_kv == 0"],
        "inputs": {"q": {"shape": ["S", "H_qo"], "dtype": "float32"}},
        "outputs": {"o": {"shape": ["T"], "dtype": "float32"}},
        "reference": "import torch\ndef run(q):\n    return torch.zeros(1)\n",
    }
    folder = make_problem(definition, [{"axes": {"H_qo": 8, "H_kv": 2, "S": 3}}])
    problem = load_problem(folder)
    assert problem.axes(problem.workloads[0])["T"] == 13
    bad = make_problem(definition, [{"axes": {"H_qo": 9, "H_kv": 2, "S": 3}}], "bad")
    violated = r"constraint 'H_qo == H_kv \* G' is violated \(G=4, H_kv=2, H_qo=9"
    with pytest.raises(ProblemError, match=violated):
        load_problem(bad)


@pytest.mark.parametrize(("change", "field", "reason"), [
    ({"inputs": {"x": {"shape": ["batch_size"], "dtype": "float12"}}},
     "inputs.x.dtype", "unknown dtype 'float12'"),
    ({"inputs": {"x": {"shape": ["nope"], "dtype": "float32"}}},
     "inputs.x.shape", "axis 'nope' is not declared"),
    ({"axes": {"batch_size": {"type": "expr", "expression": "import os"}}},
     "axes.batch_size.expression", "syntax error"),
    ({"axes": {"batch_size": {"type": "expr", "expression": "__import__('os')"}}},
     "axes.batch_size.expression", "only min/max/abs calls"),
    ({"axes": {"a": {"type": "expr", "expression": "b"}, "b": {"type": "expr",
                                                                "expression": "a"}}},
     "expression", "circular definition"),
    ({"reference": "import torch\ndef forward(x):\n    return x\n"},
     "reference", "no top-level function `run`"),
    ({"reference": "def run(:\n"}, "reference", "syntax error"),
    ({"custom_inputs_entrypoint": "make"}, "custom_inputs_entrypoint", "not a top-level"),
    ({"axes": {"batch_size": {"type": "const", "value": -3}}},
     "axes.batch_size.value", "not a non-negative integer"),
])
def test_malformed_definitions_name_file_field_and_reason(make_problem, change, field, reason):
    folder = make_problem(rmsnorm_definition(**change), [rmsnorm_workload(2)])
    with pytest.raises(ProblemError) as error:
        load_problem(folder)
    message = str(error.value)
    assert str(folder / "definition.json") in message
    assert field in message
    assert reason in message


@pytest.mark.parametrize(("workload", "field", "reason"), [
    ({"uuid": "x", "axes": {}, "inputs": {}}, "axes", "var axis 'batch_size' is never bound"),
    ({"uuid": "x", "axes": {"batch_size": 2},
      "inputs": {"hidden_states": {"type": "random"}, "eps": {"type": "scalar", "value": 1e-5}}},
     "workload x.inputs", "misses input 'weight'"),
    ({"uuid": "x", "axes": {"batch_size": 2, "hidden_size": 3}, "inputs": {}},
     "axes.hidden_size", "only var axes are bound"),
    ({**rmsnorm_workload(2, "x"), "tolerance": {"max_atol": "big"}},
     "tolerance.max_atol", "not a number"),
    ({"uuid": "x", "axes": {"batch_size": 2},
      "inputs": {"hidden_states": {"type": "random"}, "weight": {"type": "magic"},
                 "eps": {"type": "scalar", "value": 1e-5}}},
     "inputs.weight.type", "'magic' is not one of"),
    ({"uuid": "x", "axes": {"batch_size": 2},
      "inputs": {"hidden_states": {"type": "random"}, "weight": {"type": "random"},
                 "eps": {"type": "random"}}},
     "inputs.eps", "needs type 'scalar'"),
])
def test_malformed_workloads_name_file_field_and_reason(make_problem, workload, field, reason):
    folder = make_problem(rmsnorm_definition(), [workload])
    with pytest.raises(ProblemError) as error:
        load_problem(folder)
    message = str(error.value)
    assert str(folder / "workload.jsonl") in message
    assert field in message
    assert reason in message


def test_check_runs_the_reference_at_the_smallest_workload(make_problem):
    folder = make_problem(rmsnorm_definition(), [rmsnorm_workload(64), rmsnorm_workload(2, "s")])
    report = check_problem(folder)
    assert report.workload == "s"
    assert report.outputs == {"output": (2, 64)}


def test_check_reports_a_reference_that_raises_with_its_line(make_problem):
    reference = ("import torch\n\ndef run(hidden_states, weight, eps):\n"
                 "    return hidden_states @ weight.view(8, 8)\n")
    folder = make_problem(rmsnorm_definition(reference=reference), [rmsnorm_workload(2)])
    with pytest.raises(ProblemError, match=r"run\(\) raised at workload w0: RuntimeError.*line 4"):
        check_problem(folder)


def test_check_reports_wrong_output_shape(make_problem):
    reference = "def run(hidden_states, weight, eps):\n    return hidden_states[:, :3]\n"
    folder = make_problem(rmsnorm_definition(reference=reference), [rmsnorm_workload(2)])
    wrong = r"output 'output' has shape \(2, 3\), expected \(2, 64\)"
    with pytest.raises(ProblemError, match=wrong):
        check_problem(folder)


@pytest.mark.slow
def test_cli_check_prints_one_line_error_without_traceback(make_problem):
    folder = make_problem(rmsnorm_definition(reference="x = 1\n"), [rmsnorm_workload(2)])
    done = subprocess.run([sys.executable, "-m", "solforge", "check", str(folder)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "defines no top-level function `run`" in done.stderr


def test_inputs_are_seeded_realistic_and_per_input(make_problem):
    definition = rmsnorm_definition(inputs={
        "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
        "norm_weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
        "variance": {"shape": ["batch_size"], "dtype": "float32"},
        "scale_fp8": {"shape": ["batch_size", "hidden_size"], "dtype": "float8_e4m3fn"},
        "ids": {"shape": ["batch_size"], "dtype": "int32"},
        "eps": {"shape": None, "dtype": "float32"},
    }, reference="def run(hidden_states, norm_weight, variance, scale_fp8, ids, eps):\n"
                 "    return hidden_states\n")
    workload = {"uuid": "w", "axes": {"batch_size": 256},
                "inputs": {**{n: {"type": "random"} for n in definition["inputs"]},
                           "eps": {"type": "scalar", "value": 1e-6}}}
    problem = load_problem(make_problem(definition, [workload]))
    first = make_inputs(problem, problem.workloads[0], seed=1)
    again = make_inputs(problem, problem.workloads[0], seed=1)
    other = make_inputs(problem, problem.workloads[0], seed=2)
    assert torch.equal(first["hidden_states"], again["hidden_states"])
    assert not torch.equal(first["hidden_states"], other["hidden_states"])
    weight = first["norm_weight"].float()
    assert weight.min() > 0.8 and weight.max() < 1.2 and weight.std() > 0.01
    assert first["variance"].min() > 0
    assert first["scale_fp8"].float().abs().max() <= 2.0
    assert first["ids"].dtype == torch.int32 and first["ids"].min() >= 0
    assert first["eps"] == 1e-6 and isinstance(first["eps"], float)


def test_fp4_inputs_are_packed_two_per_byte(make_problem):
    definition = rmsnorm_definition(
        inputs={"w": {"shape": ["batch_size", "hidden_size"], "dtype": "float4_e2m1fn_x2"}},
        reference="def run(w):\n    return w\n")
    workload = {"uuid": "w", "axes": {"batch_size": 3}, "inputs": {"w": {"type": "random"}}}
    problem = load_problem(make_problem(definition, [workload]))
    packed = make_inputs(problem, problem.workloads[0])["w"]
    assert packed.shape == (3, 32) and packed.dtype == torch.float4_e2m1fn_x2
    values = unpack_fp4(packed)
    assert values.shape == (3, 64)
    grid = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}
    assert set(values.abs().unique().tolist()) <= grid
    assert torch.equal(unpack_fp4(pack_fp4(values)), values)


CUSTOM_REFERENCE = """import torch

def make_inputs(axes, device):
    ids = torch.randint(0, axes["E"], (axes["T"], 2), device=device, dtype=torch.int32)
    return {"ids": ids}

def run(x, ids):
    return x[ids[:, 0]]
"""


def test_custom_inputs_come_from_the_entrypoint(make_problem):
    definition = {
        "name": "route", "op_type": "moe", "custom_inputs_entrypoint": "make_inputs",
        "axes": {"T": {"type": "var"}, "E": {"type": "const", "value": 5},
                 "H": {"type": "const", "value": 4}, "K": {"type": "const", "value": 2}},
        "inputs": {"x": {"shape": ["T", "H"], "dtype": "float32"},
                   "ids": {"shape": ["T", "K"], "dtype": "int32"}},
        "outputs": {"y": {"shape": ["T", "H"], "dtype": "float32"}},
        "reference": CUSTOM_REFERENCE,
    }
    workload = {"uuid": "w", "axes": {"T": 100},
                "inputs": {"x": {"type": "random"}, "ids": {"type": "custom"}}}
    problem = load_problem(make_problem(definition, [workload]))
    ids = make_inputs(problem, problem.workloads[0])["ids"]
    assert ids.shape == (100, 2) and int(ids.min()) >= 0 and int(ids.max()) < 5
    check_problem(problem.root)


def test_meta_inputs_have_the_shapes_dtypes_and_strides_of_real_ones(make_problem):
    """What a compile ahead specialises on (forge/capture.py), with no data and no device work;
    custom inputs too (made on the CPU, then moved)."""
    definition = {
        "name": "route", "op_type": "moe", "custom_inputs_entrypoint": "make_inputs",
        "axes": {"T": {"type": "var"}, "E": {"type": "const", "value": 5},
                 "H": {"type": "const", "value": 4}, "K": {"type": "const", "value": 2}},
        "inputs": {"x": {"shape": ["T", "H"], "dtype": "bfloat16"},
                   "ids": {"shape": ["T", "K"], "dtype": "int32"},
                   "w": {"shape": ["H", "H"], "dtype": "float4_e2m1fn_x2"}},
        "outputs": {"y": {"shape": ["T", "H"], "dtype": "bfloat16"}},
        "reference": CUSTOM_REFERENCE.replace("def run(x, ids):", "def run(x, ids, w):"),
    }
    workload = {"uuid": "w", "axes": {"T": 100},
                "inputs": {"x": {"type": "random"}, "ids": {"type": "custom"},
                           "w": {"type": "random"}}}
    problem = load_problem(make_problem(definition, [workload]))
    real = make_inputs(problem, problem.workloads[0])
    meta = make_inputs(problem, problem.workloads[0], "meta")
    assert list(meta) == list(real)
    for name, tensor in meta.items():
        assert tensor.device.type == "meta"
        assert (tensor.shape, tensor.dtype, tensor.stride()) == (
            real[name].shape, real[name].dtype, real[name].stride()), name


def test_safetensors_inputs_load_relative_to_the_problem(make_problem, tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    definition = rmsnorm_definition()
    workload = rmsnorm_workload(2)
    workload["inputs"]["weight"] = {"type": "safetensors", "path": "blob/w.safetensors",
                                    "tensor_key": "weight"}
    folder = make_problem(definition, [workload])
    (folder / "blob").mkdir()
    weight = torch.arange(64, dtype=torch.bfloat16)
    safetensors.save_file({"weight": weight}, str(folder / "blob" / "w.safetensors"))
    problem = load_problem(folder)
    assert torch.equal(make_inputs(problem, problem.workloads[0])["weight"], weight)
    workload["inputs"]["weight"]["tensor_key"] = "missing"
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    with pytest.raises(ProblemError, match="'missing' not in the file"):
        make_inputs(load_problem(folder), load_problem(folder).workloads[0])
