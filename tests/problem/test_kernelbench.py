"""KernelBench import: files in tests/fixtures/kernelbench/ become problems that load and check."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from solforge.cli import app
from solforge.errors import ProblemError
from solforge.problem import load_problem, make_inputs
from solforge.problem.check import check_problem
from solforge.problem.kernelbench import import_kernelbench_dir, import_kernelbench_file
from solforge.problem.reference import reference_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernelbench"
IMPORTABLE = {
    "level1/1_Square_matrix_multiplication_",
    "level1/23_Softmax",
    "level1/39_L2Norm_scaled",
    "level1/95_CrossEntropyLoss",
    "level2/1_Conv2D_ReLU_BiasAdd",
    "level2/33_Gemm_BatchNorm_Tuple",
    "level3/90_DropPathSchedule_item",
    "level3/91_StatefulRNNCell",
    "level3/93_RelativePositionBias",
}
OPTIONAL = Path(__file__).resolve().parents[1] / "fixtures" / "kernelbench_optional"
BROKEN = FIXTURES / "level1" / "99_Broken_data_dependent.py"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    import_kernelbench_dir(FIXTURES, out)
    return out


def write_file(folder: Path, source: str) -> Path:
    path = folder / "7_Example.py"
    path.write_text(source)
    return path


def run_original(stem: str, state: dict[str, torch.Tensor], *forward_args):
    """The fixture's own Model, loaded with `state`, on the given arguments."""
    namespace = runpy.run_path(str(FIXTURES / f"{stem}.py"))
    model = namespace["Model"](*namespace["get_init_inputs"]())
    model.load_state_dict(state)
    with torch.no_grad():
        return model(*forward_args)


def test_directory_import_reports_every_file(tmp_path):
    results = import_kernelbench_dir(FIXTURES, tmp_path)
    assert {r.source.relative_to(FIXTURES).with_suffix("").as_posix()
            for r in results if r.ok} == IMPORTABLE
    failed = [r for r in results if not r.ok]
    assert [r.source for r in failed] == [BROKEN]
    assert failed[0].folder is None
    assert "Model.forward: fails on meta tensors" in failed[0].error
    assert "largest = x.abs().max().item()" in failed[0].error
    assert (tmp_path / "level2" / "1_Conv2D_ReLU_BiasAdd" / "workload.jsonl").is_file()


@pytest.mark.parametrize("address", sorted(IMPORTABLE))
def test_imported_problems_pass_check(imported, address):
    report = check_problem(imported / address)
    assert report.workloads == 1
    assert report.problem == address.split("/")[1]


def test_matmul_axes_come_from_the_module_constant(imported):
    problem = load_problem(imported / "level1/1_Square_matrix_multiplication_")
    definition = problem.definition
    assert {n: a.value for n, a in definition.axes.items()} == {"N": 64}
    assert [(s.name, s.shape, s.dtype.name) for s in definition.inputs.values()] == [
        ("A", ("N", "N"), "float32"), ("B", ("N", "N"), "float32")]
    assert definition.outputs["output"].shape == ("N", "N")
    inputs = make_inputs(problem, problem.workloads[0])
    out = reference_run(definition)(**inputs)
    torch.testing.assert_close(out, inputs["A"] @ inputs["B"])


def test_softmax_batch_constant_names_its_axis(imported):
    definition = load_problem(imported / "level1/23_Softmax").definition
    assert definition.inputs["x"].shape == ("batch_size", "dim")
    assert definition.axes["batch_size"].value == 8
    assert definition.tags == ("source:kernelbench", "kernelbench:level1")


def test_python_scalar_argument_becomes_a_scalar_input(imported):
    problem = load_problem(imported / "level1/39_L2Norm_scaled")
    scale = problem.definition.inputs["scale"]
    assert scale.is_scalar and scale.dtype.name == "float32"
    assert problem.workloads[0].inputs["scale"].value == 0.5


def test_forward_tensors_come_from_the_files_get_inputs(imported):
    problem = load_problem(imported / "level1/95_CrossEntropyLoss")
    assert problem.definition.outputs["output"].shape == ()
    assert problem.workloads[0].inputs["targets"].kind == "custom"
    targets = make_inputs(problem, problem.workloads[0])["targets"]
    assert targets.dtype == torch.int64
    assert targets.min().item() >= 0 and targets.max().item() < 10  # class ids, as in the file


def test_parameters_are_inputs_and_the_reference_matches_the_model(imported):
    problem = load_problem(imported / "level2/1_Conv2D_ReLU_BiasAdd")
    definition = problem.definition
    assert list(definition.inputs) == ["x", "bias", "conv_weight", "conv_bias"]
    assert definition.inputs["conv_weight"].shape == (
        "out_channels", "conv_weight_dim1", "conv_weight_dim2", "conv_weight_dim3")
    assert definition.outputs["output"].shape == (
        "batch_size", "out_channels", "output_dim2", "output_dim3")
    sources = {n: s.kind for n, s in problem.workloads[0].inputs.items()}
    assert sources == {"x": "custom", "bias": "random", "conv_weight": "random",
                       "conv_bias": "random"}
    inputs = make_inputs(problem, problem.workloads[0])
    out = reference_run(definition)(**inputs)
    state = {"bias": inputs["bias"], "conv.weight": inputs["conv_weight"],
             "conv.bias": inputs["conv_bias"]}
    expected = run_original("level2/1_Conv2D_ReLU_BiasAdd", state, inputs["x"])
    assert out.shape == (2, 8, 10, 10)
    torch.testing.assert_close(out, expected)


def test_buffers_are_inputs_and_tuple_outputs_are_numbered(imported):
    problem = load_problem(imported / "level2/33_Gemm_BatchNorm_Tuple")
    definition = problem.definition
    assert list(definition.inputs) == [
        "x", "gemm_weight", "gemm_bias", "bn_weight", "bn_bias", "bn_running_mean",
        "bn_running_var", "bn_num_batches_tracked"]
    assert definition.inputs["bn_num_batches_tracked"].shape == ()
    assert definition.inputs["bn_num_batches_tracked"].dtype.name == "int64"
    assert [(n, s.shape) for n, s in definition.outputs.items()] == [
        ("output0", ("batch_size", "out_features")), ("output1", ("batch_size",))]
    inputs = make_inputs(problem, problem.workloads[0])
    normalized, row_max = reference_run(definition)(**inputs)
    state = {
        "gemm.weight": inputs["gemm_weight"], "gemm.bias": inputs["gemm_bias"],
        "bn.weight": inputs["bn_weight"], "bn.bias": inputs["bn_bias"],
        "bn.running_mean": inputs["bn_running_mean"], "bn.running_var": inputs["bn_running_var"],
        "bn.num_batches_tracked": inputs["bn_num_batches_tracked"],
    }
    expected_normalized, expected_max = run_original("level2/33_Gemm_BatchNorm_Tuple", state,
                                                     inputs["x"])
    torch.testing.assert_close(normalized, expected_normalized)
    torch.testing.assert_close(row_max, expected_max)


def test_directory_import_needs_a_folder(tmp_path):
    with pytest.raises(ProblemError, match="not a folder"):
        import_kernelbench_dir(tmp_path / "missing", tmp_path / "out")


def test_reimport_gives_the_same_uuid(tmp_path):
    source = FIXTURES / "level1" / "23_Softmax.py"
    first = import_kernelbench_file(source, tmp_path / "a")
    second = import_kernelbench_file(source, tmp_path / "b", name="softmax")
    assert second.name == "softmax"
    uuids = [json.loads((f / "workload.jsonl").read_text())["uuid"] for f in (first, second)]
    assert uuids[0] == uuids[1]


MODEL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2
"""


@pytest.mark.parametrize(("source", "field", "reason"), [
    (MODEL + "\ndef get_inputs():\n    return [torch.randn(2)]\n",
     "get_init_inputs", "not defined"),
    ("import torch\n\ndef get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n",
     "Model", "not defined"),
    ("import torch\nSIZE = 1 // 0\n", "<import>", "ZeroDivisionError"),
    (MODEL + "\ndef get_inputs():\n    return [torch.randn(2), torch.randn(2)]\n"
             "\ndef get_init_inputs():\n    return []\n",
     "get_inputs", "returns 2 values but Model.forward takes 1"),
    (MODEL + "\ndef get_inputs():\n    return [[1, 2]]\n\ndef get_init_inputs():\n    return []\n",
     "get_inputs", "forward argument 'x' is a list"),
    ("import torch\n\nclass Model:\n    pass\n\ndef get_inputs():\n    return []\n"
     "\ndef get_init_inputs():\n    return []\n",
     "Model", "not a subclass of torch.nn.Module"),
])
def test_bad_files_give_precise_errors(tmp_path, source, field, reason):
    path = write_file(tmp_path, source)
    with pytest.raises(ProblemError) as caught:
        import_kernelbench_file(path, tmp_path / "out")
    assert caught.value.file == str(path)
    assert caught.value.field == field
    assert reason in caught.value.reason
    assert not (tmp_path / "out").exists()


def test_import_error_names_the_failing_line(tmp_path):
    path = write_file(tmp_path, "import torch\nSIZE = 1 // 0\n")
    with pytest.raises(ProblemError, match=r"line 2: SIZE = 1 // 0"):
        import_kernelbench_file(path, tmp_path / "out")


def test_plain_tensor_attribute_becomes_an_input(imported):
    """An RNN's `self.hidden` (a plain tensor, overwritten by each call) is handed to the kernel
    as the input `hidden`; the reference equals the original model started from that state."""
    problem = load_problem(imported / "level3/91_StatefulRNNCell")
    assert problem.definition.inputs["hidden"].shape == ("batch_size", "hidden_size")
    assert problem.workloads[0].inputs["hidden"].kind == "random"
    inputs = make_inputs(problem, problem.workloads[0])
    out = reference_run(problem.definition)(**inputs)
    namespace = runpy.run_path(str(FIXTURES / "level3" / "91_StatefulRNNCell.py"))
    model = namespace["Model"](*namespace["get_init_inputs"]())
    model.load_state_dict({k.replace("_", ".", 1): v for k, v in inputs.items()
                           if k not in ("x", "hidden")})
    model.hidden = inputs["hidden"].clone()
    with torch.no_grad():
        torch.testing.assert_close(out, model(inputs["x"]))
    again = reference_run(problem.definition)(**inputs)  # no state leaks from call to call
    torch.testing.assert_close(again, out)


def test_constructor_reading_values_is_built_on_the_cpu(imported):
    """`.item()` in the constructor cannot run on meta tensors: the model is built on the CPU
    and moved to meta, in the importer and in the reference alike."""
    problem = load_problem(imported / "level3/90_DropPathSchedule_item")
    assert "blocks_3_weight" in problem.definition.inputs
    assert check_problem(imported / "level3/90_DropPathSchedule_item").workloads == 1


def test_einops_file_imports_where_einops_is_installed(tmp_path):
    pytest.importorskip("einops", reason="einops is an optional dependency (kernelbench extra)")
    folder = import_kernelbench_file(OPTIONAL / "level3" / "92_EinopsPatchify.py", tmp_path)
    report = check_problem(folder)
    assert report.outputs == {"output": (2, 16, 32)}


def test_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "einops", None)  # `import einops` fails
    with pytest.raises(ProblemError) as caught:
        import_kernelbench_file(OPTIONAL / "level3" / "92_EinopsPatchify.py", tmp_path)
    assert caught.value.field == "<import>"
    assert "needs the Python package 'einops'" in caught.value.reason
    assert "solforge[kernelbench]" in caught.value.reason


def test_a_file_that_needs_the_hugging_face_hub_says_so(tmp_path):
    """Level 4 builds models by Hub name; offline, the import fails with what to do."""
    source = tmp_path / "src" / "level4" / "1_hub_model.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import torch\n\n\n"
        "def _from_pretrained(name):\n"
        "    raise OSError(\"We couldn't connect to 'https://huggingface.co' to load the \"\n"
        "                  \"files, and couldn't find them in the cached files.\")\n\n\n"
        "config = _from_pretrained('gpt2')\n")
    with pytest.raises(ProblemError) as caught:
        import_kernelbench_file(source, tmp_path / "out")
    assert "huggingface.co" in caught.value.reason and "HF_HOME" in caught.value.reason


def test_cli_imports_a_folder_and_reports_the_failure(tmp_path):
    result = CliRunner().invoke(app, ["import", "kernelbench", str(FIXTURES), "-o",
                                      str(tmp_path)])
    assert result.exit_code == 1
    assert "9 of 10 files imported" in result.output
    assert "fails on meta tensors" in result.output
    assert (tmp_path / "level1" / "23_Softmax" / "definition.json").is_file()


def test_cli_imports_one_file_under_a_given_name(tmp_path):
    source = FIXTURES / "level1" / "1_Square_matrix_multiplication_.py"
    result = CliRunner().invoke(app, ["import", "kernelbench", str(source), "-o", str(tmp_path),
                                      "--name", "square_matmul"])
    assert result.exit_code == 0, result.output
    assert load_problem(tmp_path / "square_matmul").name == "square_matmul"


@pytest.mark.slow
def test_import_script_analyzes_every_fixture_with_no_uncosted_op(tmp_path):
    """benchmarks/kernelbench_import.py's per-file step (import, load, analyze on the H200) on
    every importable fixture: nothing is left without a cost rule."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from kernelbench_import import import_and_analyze

    records = [import_and_analyze(FIXTURES / f"{address}.py", tmp_path / address.split("/")[0])
               for address in sorted(IMPORTABLE)]
    for record in records:
        assert record["imported"], record
        assert "analysis_error" not in record, record
        assert record["uncosted_ops"] == [], record
        assert record["t_sol_ms"] > 0
    broken = import_and_analyze(BROKEN, tmp_path / "broken")
    assert not broken["imported"] and "fails on meta tensors" in broken["error"]


def test_attribute_named_like_a_forward_argument_gets_its_own_input(tmp_path):
    """`self.h0` kept beside `forward(x, h0)` (KernelBench's GRU files): both are inputs."""
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.h0 = torch.randn(2, 4)\n\n"
              "    def forward(self, x, h0):\n        return x + h0\n\n\n"
              "def get_inputs():\n    return [torch.randn(2, 4), torch.randn(2, 4)]\n\n\n"
              "def get_init_inputs():\n    return []\n")
    folder = import_kernelbench_file(write_file(tmp_path, source), tmp_path / "out")
    problem = load_problem(folder)
    assert list(problem.definition.inputs) == ["x", "h0", "state_h0"]
    inputs = make_inputs(problem, problem.workloads[0])
    out = reference_run(problem.definition)(**inputs)
    torch.testing.assert_close(out, inputs["x"] + inputs["h0"])


def test_integer_buffers_keep_the_values_the_model_computes(imported):
    """An index table (Swin's relative_position_index) is a custom input taken from the model
    built on the device, so gathers through it stay in range."""
    problem = load_problem(imported / "level3/93_RelativePositionBias")
    assert problem.workloads[0].inputs["index"].kind == "custom"
    inputs = make_inputs(problem, problem.workloads[0])
    namespace = runpy.run_path(str(FIXTURES / "level3" / "93_RelativePositionBias.py"))
    model = namespace["Model"](*namespace["get_init_inputs"]())
    assert torch.equal(inputs["index"], model.index)
    model.table.data = inputs["table"]
    out = reference_run(problem.definition)(**inputs)
    torch.testing.assert_close(out, model(inputs["scores"]).detach())
