"""SOL-ExecBench and flashinfer-trace imports: the fixtures in each layout become problems that
load and check, and every broken entry is reported without stopping the import."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from solforge.cli import app
from solforge.data.solution import load_solution, parse_solution
from solforge.data.trace import Correctness, Environment, Evaluation, Performance, Status, Trace
from solforge.problem import load_problem, make_inputs
from solforge.problem.check import check_problem
from solforge.problem.datasets import (
    ImportReport,
    import_flashinfer_trace,
    import_sol_execbench,
    tier_of_category,
)
from solforge.problem.suite import open_problem
from solforge.problem.trace_set import (
    SECTIONS,
    TraceSet,
    add_problem,
    add_solution,
    add_traces,
    read_trace_set,
    traces_of,
    write_trace_set,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOL = FIXTURES / "sol_execbench"
FIB = FIXTURES / "flashinfer_trace"
SOL_PROBLEMS = {
    "l1/001_fused_add_rmsnorm_h64",
    "l1/002_moe_route_scale_e8",
    "l2/001_rmsnorm_gate_up_silu_h32_i48",
    "quant/001_fp8_rowwise_scaled_gemm_n48_k64",
    "fib/segment_sum_h16",
}
FIB_PROBLEMS = {"fib/rmsnorm_h64", "fib/segment_sum_h16"}
SHIPPED_RMSNORM = (Path(__file__).resolve().parents[2] / "src" / "solforge" / "solutions" / "l1"
                   / "rmsnorm_llama3_1_8b" / "triton_rmsnorm.json")
SEGMENT_BLOB = ("blob/workloads/segment_sum/segment_sum_h16/"
                "segment_sum_h16_92749eb1-247a-4a1e-a44c-c2e851aec653.safetensors")


def addresses(report: ImportReport, out: Path) -> set[str]:
    return {folder.relative_to(out).as_posix() for folder in report.written}


def issue_for(report: ImportReport, text: str):
    """The one issue whose file, field or reason mentions `text`."""
    found = [i for i in report.issues if text in f"{i.file} {i.field} {i.reason}"]
    assert len(found) == 1, report.issues
    return found[0]


@pytest.fixture(scope="module")
def sol_import(tmp_path_factory) -> tuple[ImportReport, Path]:
    out = tmp_path_factory.mktemp("sol")
    return import_sol_execbench(SOL, out, blob_roots=[FIB]), out


@pytest.fixture(scope="module")
def fib_import(tmp_path_factory) -> tuple[ImportReport, Path]:
    out = tmp_path_factory.mktemp("fib")
    return import_flashinfer_trace(FIB, out), out


def test_sol_execbench_rows_and_folders_land_in_their_tiers(sol_import):
    report, out = sol_import
    assert addresses(report, out) == SOL_PROBLEMS


@pytest.mark.parametrize("address", sorted(SOL_PROBLEMS))
def test_every_sol_execbench_import_checks(sol_import, address):
    _, out = sol_import
    report = check_problem(out / address)
    assert report.workloads == 2


def test_sol_execbench_broken_entries_are_reported_and_the_rest_imported(sol_import):
    report, _ = sol_import
    assert len(report.issues) == 4
    truncated = issue_for(report, "line 4")
    assert truncated.file.endswith("rows/L1/train.jsonl")
    assert "invalid JSON" in truncated.reason
    undeclared = issue_for(report, "003_broken_undeclared_axis")
    assert (undeclared.field, undeclared.reason) == (
        "inputs.x.shape", "axis 'N' is not declared in `axes`")
    unbound = issue_for(report, "d4090585")
    assert "row 1 (001_fused_add_rmsnorm_h64)" in unbound.file
    assert unbound.reason == "var axis 'batch_size' is never bound"
    assert "invalid JSON" in issue_for(report, "002_broken_json").reason


def test_row_columns_of_json_text_become_the_definition(sol_import):
    _, out = sol_import
    moe = load_problem(out / "l1/002_moe_route_scale_e8")
    assert moe.definition.custom_inputs_entrypoint == "make_routing"
    assert moe.definition.axes["num_routes"].expression == "num_tokens * top_k"
    assert moe.definition.extra == {"hf_id": None}
    workload = moe.workloads[0]
    inputs = make_inputs(moe, workload)
    assert inputs["expert_ids"].shape == (2 * workload.axes["num_tokens"],)
    assert int(inputs["expert_ids"].max()) < 8
    rmsnorm = load_problem(out / "l1/001_fused_add_rmsnorm_h64")
    assert rmsnorm.workloads[0].inputs["eps"].value == 1e-6
    assert rmsnorm.workloads[1].tolerance.max_atol == 0.02


def test_folder_layout_takes_the_tier_from_the_config_folder_and_keeps_expr_axes(sol_import):
    _, out = sol_import
    problem = load_problem(out / "l2/001_rmsnorm_gate_up_silu_h32_i48")
    assert problem.definition.axes["gate_up_size"].expression == "2 * intermediate_size"
    assert problem.axes(problem.workloads[0])["gate_up_size"] == 96


def test_safetensors_blobs_are_copied_into_the_problem_folder(sol_import):
    _, out = sol_import
    folder = out / "fib/segment_sum_h16"
    assert (folder / SEGMENT_BLOB).is_file()
    problem = load_problem(folder)
    inputs = make_inputs(problem, problem.workloads[0])
    assert inputs["indptr"].tolist() == [0, 3, 10]


def test_a_blob_outside_the_search_roots_is_reported(tmp_path):
    report = import_sol_execbench(SOL / "rows" / "FlashInfer-Bench", tmp_path)
    assert report.written == ()
    missing = [i for i in report.issues if "not found" in i.reason]
    assert len(missing) == 2  # both workloads, then the problem itself
    assert issue_for(report, "none of its 2 workloads loads").field == "workloads"


def test_a_folder_without_workloads_is_reported_precisely(tmp_path):
    source = tmp_path / "src" / "l1" / "lonely"
    source.mkdir(parents=True)
    shutil.copy(SOL / "benchmark" / "L2" / "001_rmsnorm_gate_up_silu_h32_i48" / "definition.json",
                source)
    report = import_sol_execbench(tmp_path / "src", tmp_path / "out")
    assert report.written == ()
    issue = issue_for(report, "lonely")
    assert issue.field == "workload.jsonl"
    assert issue.reason.startswith("no such file beside definition.json")


def test_referenced_blobs_stay_where_they_are(tmp_path):
    report = import_flashinfer_trace(FIB, tmp_path, copy_blobs=False)
    folder = tmp_path / "fib/segment_sum_h16"
    assert not (folder / "blob").exists()
    source = load_problem(folder).workloads[0].inputs["indptr"]
    assert (folder / source.path).resolve() == (FIB / SEGMENT_BLOB).resolve()
    assert folder in report.written
    check_problem(folder)


def test_tier_option_overrides_the_path(tmp_path):
    report = import_sol_execbench(SOL / "rows" / "Quant" / "train.json", tmp_path, tier="l2")
    assert addresses(report, tmp_path) == {"l2/001_fp8_rowwise_scaled_gemm_n48_k64"}


def test_categories_map_to_tiers():
    assert [tier_of_category(c) for c in ("L1", "L2", "Quant", "FlashInfer-Bench", "FIB")] == [
        "l1", "l2", "quant", "fib", "fib"]
    assert tier_of_category("train") is None


def test_parquet_rows(tmp_path):
    parquet = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    lines = (SOL / "rows" / "L1" / "train.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines[:2]]  # the two good rows, as HF stores them
    path = tmp_path / "data" / "L1" / "train" / "0000.parquet"
    path.parent.mkdir(parents=True)
    parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    report = import_sol_execbench(tmp_path / "data", tmp_path / "out")
    assert addresses(report, tmp_path / "out") == {"l1/001_fused_add_rmsnorm_h64",
                                                   "l1/002_moe_route_scale_e8"}


def test_dataset_viewer_rows_answer(tmp_path):
    row = json.loads((SOL / "rows" / "Quant" / "train.json").read_text())[0]
    path = tmp_path / "Quant.json"
    path.write_text(json.dumps({"rows": [{"row_idx": 0, "row": row, "truncated_cells": []}]}))
    report = import_sol_execbench(path, tmp_path / "out")
    assert addresses(report, tmp_path / "out") == {"quant/001_fp8_rowwise_scaled_gemm_n48_k64"}


def test_flashinfer_trace_layout(fib_import):
    report, out = fib_import
    assert addresses(report, out) == FIB_PROBLEMS
    for address in FIB_PROBLEMS:
        check_problem(out / address)
    segment = load_problem(out / "fib/segment_sum_h16")
    assert segment.definition.op_type == "segment_sum"
    assert segment.definition.tags == ("status:verified",)
    assert len(segment.workloads) == 2  # the third names a blob that is not in the dataset


def test_flashinfer_trace_broken_entries_are_reported(fib_import):
    report, _ = fib_import
    assert len(report.issues) == 3
    assert issue_for(report, "moe_broken_no_run").reason == (
        "defines no top-level function `run`")
    orphan = issue_for(report, "gemm_n8_k8")
    assert (orphan.field, orphan.reason) == (
        "definition", "no definition named 'gemm_n8_k8' under definitions/")
    missing = issue_for(report, "b11431bf")
    assert missing.field == "workload b11431bf-5443-4c97-bab0-a053824dfaac.inputs.indptr.path"


def test_imported_folders_import_again_as_folders(fib_import, tmp_path):
    _, first = fib_import
    report = import_flashinfer_trace(first / "fib", tmp_path)
    assert addresses(report, tmp_path) == FIB_PROBLEMS
    assert report.issues == ()
    problem = load_problem(tmp_path / "fib/segment_sum_h16")
    assert make_inputs(problem, problem.workloads[1])["indptr"].tolist() == [0, 5, 5, 20]


def test_git_lfs_pointers_are_reported(tmp_path):
    dataset = tmp_path / "trace"
    shutil.copytree(FIB, dataset)
    (dataset / SEGMENT_BLOB).write_text("version https://git-lfs.github.com/spec/v1\n")
    report = import_flashinfer_trace(dataset, tmp_path / "out")
    assert "Git LFS pointer" in issue_for(report, "92749eb1").reason
    assert len(load_problem(tmp_path / "out/fib/segment_sum_h16").workloads) == 1


def test_the_same_name_twice_is_reported(fib_import, tmp_path):
    _, first = fib_import
    for copy in ("a", "b"):
        shutil.copytree(first / "fib" / "rmsnorm_h64", tmp_path / "src" / copy / "rmsnorm_h64")
    report = import_flashinfer_trace(tmp_path / "src", tmp_path / "out")
    assert len(report.written) == 1
    assert "already imported" in issue_for(report, "b/rmsnorm_h64").reason


def test_cli_imports_and_exits_nonzero_when_entries_were_skipped(tmp_path):
    runner = CliRunner()
    sol = runner.invoke(app, ["import", "sol-execbench", str(SOL), "-o", str(tmp_path),
                              "--blob-root", str(FIB)])
    assert sol.exit_code == 1, sol.output
    assert "5 problems written" in sol.output and "4 entries skipped" in sol.output
    fib = runner.invoke(app, ["import", "flashinfer-trace", str(FIB),
                              "-o", str(tmp_path / "fib-out"), "--reference-blobs"])
    assert fib.exit_code == 1 and "2 problems written" in fib.output
    clean = runner.invoke(app, ["import", "flashinfer-trace", str(tmp_path / "fib"),
                                "-o", str(tmp_path / "again")])
    assert clean.exit_code == 0, clean.output
    assert runner.invoke(app, ["import", "kernelbench", "--help"]).exit_code == 0
    bad_tier = runner.invoke(app, ["import", "sol-execbench", str(SOL), "-o", str(tmp_path),
                                   "--tier", "l9"])
    assert bad_tier.exit_code == 2



# ---- FlashInfer-Bench's dataset layout (trace sets) ------------------------------------------

def _trace(status: str, **evaluation) -> Trace:
    base = Evaluation(status=Status(status), environment=Environment("H200", {"torch": "2.11"}),
                      timestamp="2026-12-01T00:00:00+00:00", **evaluation)
    return Trace("rmsnorm_llama3_1_8b", "rmsnorm_triton", {"uuid": "w1", "axes": {},
                                                          "inputs": {}}, base)


def test_trace_set_is_read_and_written_unchanged(tmp_path):
    original = read_trace_set(FIB)
    written = write_trace_set(original, tmp_path / "copy")
    again = read_trace_set(written)
    assert again.files == original.files
    assert sorted(original.files) == sorted(
        p.relative_to(FIB).as_posix() for s in SECTIONS if (FIB / s).is_dir()
        for p in (FIB / s).rglob("*.json*"))
    assert "rmsnorm_h64" in again.definition_names()


def _solforge_trace_set(root: Path) -> TraceSet:
    problem = open_problem("l1/rmsnorm_llama3_1_8b")
    solution = load_solution(SHIPPED_RMSNORM)
    trace_set = TraceSet(root)
    add_problem(trace_set, problem)
    op_type = problem.definition.op_type
    add_solution(trace_set, solution, op_type)
    passed = _trace("PASSED", correctness=Correctness(), performance=Performance(0.02, 0.03, 1.5),
                    build_seconds=0.0)
    hacked = _trace("REWARD_HACK", evidence="replaced harness or timing functions")
    add_traces(trace_set, [passed, hacked], op_type)
    write_trace_set(trace_set)
    return trace_set


def test_solforge_records_round_trip_through_the_layout(tmp_path):
    _solforge_trace_set(tmp_path)
    back = read_trace_set(tmp_path)
    assert back.definition_names() == ["rmsnorm_llama3_1_8b"]
    assert len(back.records("workloads")) == len(open_problem("l1/rmsnorm_llama3_1_8b").workloads)
    solution = back.records("solutions")[0]
    assert solution["spec"]["language"] == "triton" and solution["spec"]["languages"] == ["triton"]
    assert parse_solution(solution).name == load_solution(SHIPPED_RMSNORM).name
    statuses = [t.evaluation.status for t in traces_of(back)]
    assert statuses == [Status.PASSED, Status.REWARD_HACK]  # solforge's status restored
    hacked = back.records("traces")[1]["evaluation"]
    assert hacked["status"] == "RUNTIME_ERROR" and hacked["solforge_status"] == "REWARD_HACK"


def test_what_solforge_writes_validates_against_flashinfer_bench(tmp_path):
    """FlashInfer-Bench's own reader (its pydantic schema) loads the set solforge wrote."""
    how = ("flashinfer-bench is not in the dev extra (it pulls flashinfer-python and the CUTLASS "
           "DSL libraries); `pip install --no-deps flashinfer-bench==0.1.2 docstring_parser` "
           "runs this check")
    try:
        import flashinfer_bench.data as fib_data
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs without it: .ci/run must install it. {how}")
        pytest.skip(how)
    _solforge_trace_set(tmp_path)
    loaded = fib_data.TraceSet.from_path(str(tmp_path))
    assert list(loaded.definitions) == ["rmsnorm_llama3_1_8b"]
    assert [s.name for s in loaded.solutions["rmsnorm_llama3_1_8b"]] == [
        load_solution(SHIPPED_RMSNORM).name]
    assert [t.evaluation.status.value for t in loaded.traces["rmsnorm_llama3_1_8b"]] == [
        "PASSED", "RUNTIME_ERROR"]
    assert len(loaded.workloads["rmsnorm_llama3_1_8b"]) >= 4
