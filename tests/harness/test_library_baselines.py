"""Library baselines: which bundled problems map to which library, and the generated solutions."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import fake_flashinfer
import pytest
import torch
from harness_corpus import HONEST, PROBLEMS, short_limits
from helpers import benchmark_script

from solforge.data.solution import Solution, SourceFile, load_solution
from solforge.data.trace import BaselineReport, Status
from solforge.harness.evaluate import EvalConfig, EvaluationRun, evaluate
from solforge.harness.library_baselines import (
    ENTRY,
    LibraryBaseline,
    library_baseline,
    score_against_library,
)
from solforge.harness.sol import SpeedOfLight
from solforge.problem import load_problem, make_inputs
from solforge.problem.suite import open_problem

REPO = Path(__file__).resolve().parents[2]
EVALUATE = importlib.import_module("solforge.harness.evaluate")  # the package exports a function


@pytest.mark.parametrize(("address", "name"), [
    ("l1/gqa_causal_prefill_llama3_1_8b", "cudnn-sdpa"),
    ("l1/gemm_llama3_1_8b_qkv", "cublaslt"),
    ("l1/hgemm_fp16", "cublaslt"),
    ("l1/rmsnorm_llama3_1_8b", "flashinfer-rmsnorm"),
    ("l1/rmsnorm_gemma3_27b", "flashinfer-rmsnorm"),
    ("fib/rope_qwen3_8b", "flashinfer-rope"),  # NeoX halves
    ("fib/rope_deepseek_v3", "flashinfer-rope"),  # interleaved pairs, one key for all heads
    ("fib/top_k_renorm_probs_deepseek_v3", "flashinfer-top-k-renorm"),
    ("fib/gqa_paged_decode_llama3_1_8b_ps1", "flashinfer-paged-decode"),
    ("fib/gqa_paged_decode_llama3_1_70b_ps64", "flashinfer-paged-decode"),
    # The reference pads the batch for SDPA: the op itself is FlashInfer's ragged prefill.
    ("fib/gqa_ragged_prefill_llama3_1_8b", "flashinfer-ragged-prefill"),
    ("fib/gqa_ragged_prefill_qwen3_30b_a3b", "flashinfer-ragged-prefill"),
    ("fib/top_p_sampling_qwen3_8b", None),  # the uniform is an input: FlashInfer draws its own
    ("l1/rope_cos_sin_cache_qwen3_32b", None),  # a bfloat16 cache: FlashInfer takes float32
    ("l1/rope_llama3_1_8b", None),  # no cache: angles from the positions
    ("l1/softmax_llama3_1_8b_vocab", None),
    ("quant/fp8_gemm_per_tensor_llama3_1_8b_qkv", None),  # four inputs: not a plain GEMM
])
def test_problems_map_to_the_library_that_implements_them(address, name):
    found = library_baseline(open_problem(address).definition)
    assert (found.name if found else None) == name


def _namespace(address: str) -> dict:
    solution = library_baseline(open_problem(address).definition).solution
    namespace: dict = {}
    exec(compile(solution.sources[0].content, "kernel.py", "exec"), namespace)
    return namespace


def test_gemm_operand_follows_the_weight_layout():
    assert "matmul(x, weight.T)" in library_baseline(
        open_problem("l1/gemm_llama3_1_8b_qkv").definition).solution.sources[0].content
    assert "matmul(a, b)" in library_baseline(
        open_problem("l1/hgemm_fp16").definition).solution.sources[0].content


def test_gemma_rmsnorm_uses_the_one_plus_weight_kernel():
    source = library_baseline(open_problem("l1/rmsnorm_gemma3_27b").definition).solution
    assert "flashinfer.norm.gemma_rmsnorm(" in source.sources[0].content
    assert source.preload_modules() == ("flashinfer",)


@pytest.mark.parametrize("address", ["l1/rmsnorm_llama3_1_8b", "l1/rmsnorm_gemma3_27b",
                                     "fib/rope_qwen3_8b", "fib/rope_deepseek_v3",
                                     "fib/top_k_renorm_probs_deepseek_v3",
                                     "fib/gqa_paged_decode_llama3_1_8b_ps1",
                                     "fib/gqa_paged_decode_qwen3_30b_a3b_ps64",
                                     "fib/gqa_ragged_prefill_llama3_1_8b",
                                     "fib/gqa_ragged_prefill_qwen3_30b_a3b"])
def test_flashinfer_baselines_compute_what_the_reference_computes(address, monkeypatch):
    """Through a FlashInfer with the documented semantics, each baseline's code gives the
    reference's outputs on the smallest workload: the rotation layout the probe read off the
    reference, and the flattening FlashInfer's RoPE wants, are right."""
    from solforge.problem.reference import load_reference_module

    fake_flashinfer.install(monkeypatch)
    problem = open_problem(address)
    inputs = list(make_inputs(problem, problem.smallest_workload()).values())
    got = _namespace(address)[ENTRY](*inputs)
    want = load_reference_module(problem.definition).run(*inputs)
    for out, expected in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        assert out.shape == expected.shape
        torch.testing.assert_close(out.float(), expected.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(("address", "wrapper"), [
    ("fib/gqa_paged_decode_llama3_1_8b_ps16", fake_flashinfer.PagedDecodeWrapper),
    ("fib/gqa_ragged_prefill_llama3_1_8b", fake_flashinfer.RaggedPrefillWrapper)])
def test_planned_baselines_plan_on_every_call(address, wrapper, monkeypatch):
    """The harness gives each timed call new inputs: a plan kept from an earlier page table or
    batch would attend over the wrong tokens, so the baseline plans every call (the wrapper and
    its workspace are what it keeps)."""
    fake_flashinfer.install(monkeypatch)
    problem = open_problem(address)
    function = _namespace(address)[ENTRY]
    before = wrapper.plans
    for _ in range(3):
        function(*make_inputs(problem, problem.smallest_workload()).values())
    assert wrapper.plans - before == 3


def test_a_ragged_prefill_without_its_mask_computes_something_else(monkeypatch):
    """The stand-in is strict about the mask: the generated call with causal=False gives
    other outputs than the reference, so the equality above rests on the flag the probe read."""
    from solforge.problem.reference import load_reference_module

    fake_flashinfer.install(monkeypatch)
    address = "fib/gqa_ragged_prefill_llama3_1_8b"
    problem = open_problem(address)
    solution = library_baseline(problem.definition).solution
    source = solution.sources[0].content
    assert source.count("causal=True") == 1
    namespace: dict = {}
    exec(compile(source.replace("causal=True", "causal=False"), "kernel.py", "exec"), namespace)
    inputs = list(make_inputs(problem, problem.smallest_workload()).values())
    got = namespace[ENTRY](*inputs)
    want = load_reference_module(problem.definition).run(*inputs)
    assert not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_a_rope_that_matches_neither_rotation_gets_no_baseline():
    """The cache read the other way round (sin first): neither FlashInfer layout computes it.
    A reference that cannot run on the CPU probe gets none either, without an error."""
    definition = open_problem("fib/rope_qwen3_8b").definition
    swapped = definition.reference.replace("cos, sin = cos_sin_cache[positions].chunk(",
                                           "sin, cos = cos_sin_cache[positions].chunk(")
    assert swapped != definition.reference
    assert library_baseline(replace(definition, reference=swapped)) is None
    cuda_only = definition.reference + "\n\ndef run(*args):\n    assert args[0].is_cuda\n"
    assert library_baseline(replace(definition, reference=cuda_only)) is None  # no crash


def test_cudnn_sdpa_forces_cudnn_with_no_fallback():
    """On the CPU there is no cuDNN attention: the forced backend must fail, not fall back to
    PyTorch's math kernel (which would time the wrong library)."""
    problem = open_problem("l1/attention_whisper_large_v3_encoder")
    workload = problem.smallest_workload()
    inputs = make_inputs(problem, workload)
    function = _namespace("l1/attention_whisper_large_v3_encoder")[ENTRY]
    with pytest.raises(RuntimeError):
        function(*inputs.values())
    reference = _namespace("l1/attention_whisper_large_v3_encoder")["run"]
    assert isinstance(reference(*inputs.values()), torch.Tensor)


def test_score_against_the_library_is_the_sol_score():
    assert score_against_library(2.0, 2.0, 1.0) == pytest.approx(0.5)
    assert score_against_library(1.0, 3.0, 1.0) == pytest.approx(1.0)


@pytest.mark.slow
def test_library_script_cpu_mode_records_why_a_library_cannot_run(tmp_path):
    out = tmp_path / "lib.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "library_baselines_gpu.py"),
                           "l1/gemm_llama3_1_8b_qkv", "l1/softmax_llama3_1_8b_vocab",
                           "--device", "cpu", "-o", str(out), "--problem-limit-s", "500"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "l1/gemm_llama3_1_8b_qkv: judging" in done.stdout + done.stderr  # before it ends
    (record,) = json.loads(out.read_text())["problems"]  # softmax maps to no library
    assert record["problem"] == "l1/gemm_llama3_1_8b_qkv" and record["library"] == "cublaslt"
    (result,) = record["workloads"].values()
    try:
        import nvmath  # noqa: F401
    except ImportError:
        assert result["status"] == "COMPILE_ERROR"
        assert "nvmath-python" in result["message"]
    else:
        assert result["status"] in ("PASSED", "RUNTIME_ERROR")


def test_library_script_on_a_gpu_leaves_a_missing_library_for_later(monkeypatch):
    """On the GPU a library that is not installed is no measurement: the problem stays left
    (an H200 without FlashInfer once recorded four COMPILE_ERRORs as RMSNorm's baselines)."""
    script = benchmark_script("library_baselines_gpu")
    monkeypatch.setattr(script, "missing_library", lambda solution: "flashinfer is missing")
    monkeypatch.setattr(script, "evaluate", lambda *a: pytest.fail("evaluated anyway"))
    with pytest.raises(script.LibraryMissing, match="flashinfer is missing"):
        script.judge_problem("l1/rmsnorm_llama3_1_8b", EvalConfig(device="cuda"))


def _library(problem, name: str, body: str) -> LibraryBaseline:
    """A stand-in library for the CPU: the reference itself, or whatever `body` does."""
    names = ", ".join(problem.definition.inputs)
    source = (f"{problem.definition.reference.rstrip()}\n\n\n"
              f"def {ENTRY}({names}):\n    {body.format(names=names)}\n")
    solution = Solution(name=f"library-{name}", definition=problem.name, author="library",
                        languages=("pytorch",), entry_file="kernel.py", entry_function=ENTRY,
                        destination_passing_style=False,
                        sources=(SourceFile("kernel.py", source),))
    return LibraryBaseline(name, "torch", solution)


@pytest.mark.slow
def test_eval_times_the_library_beside_the_baselines_and_caches_it(tmp_path, monkeypatch):
    """`eval --library`: the library's time sits beside T_b in each trace (T_b and S are
    unchanged), a second evaluation finds it in the baseline store, and a library that fails
    or does not fit leaves a note while the candidate still PASSES."""
    problem = load_problem(PROBLEMS / "rmsnorm_small")
    candidate = load_solution(HONEST / "pytorch_rmsnorm" / "solution.py", problem.name)
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, limits=short_limits(),
                        cache_dir=tmp_path / "cache", library=True)
    timed = []
    original = EvaluationRun.time_library

    def counted(run, found, kind, workloads, report):
        timed.append(found.name)
        return original(run, found, kind, workloads, report)

    monkeypatch.setattr(EvaluationRun, "time_library", counted)
    fits = _library(problem, "fake", "return run({names})")
    monkeypatch.setattr(EVALUATE, "library_baseline", lambda definition: fits)
    [first] = evaluate(problem, candidate, config)
    [second] = evaluate(problem, candidate, config)
    assert timed == ["fake"]  # the second one read the store
    for trace in (first, second):
        assert trace.status is Status.PASSED, trace.evaluation.log
        baseline = trace.evaluation.baseline
        assert baseline.library == "fake" and baseline.library_ms > 0
        assert baseline.chosen == "eager" and trace.evaluation.library_score is None  # CPU
    assert second.evaluation.baseline.library_ms == first.evaluation.baseline.library_ms

    broken = _library(problem, "broken", "raise RuntimeError('no kernel for this shape')")
    monkeypatch.setattr(EVALUATE, "library_baseline", lambda definition: broken)
    [failed] = evaluate(problem, candidate, config)
    assert failed.status is Status.PASSED and failed.evaluation.baseline.library_ms is None
    assert any(n.startswith("library baseline broken: RUNTIME_ERROR") and "no kernel" in n
               for n in failed.evaluation.notes), failed.evaluation.notes

    monkeypatch.setattr(EVALUATE, "library_baseline", lambda definition: None)
    [none] = evaluate(problem, candidate, config)
    assert none.evaluation.baseline.library is None
    assert "library baseline: none fits this problem" in none.evaluation.notes


def test_the_library_score_replaces_t_b_by_the_library_time_on_a_gpu_only():
    run = EvaluationRun(load_problem(PROBLEMS / "rmsnorm_small"), EvalConfig(device="cpu"))
    sol = SpeedOfLight(0.5, 0.5, "memory", "H200")
    with_library = BaselineReport("eager", 2.0, library="fake", library_ms=3.0)
    assert run._library_score(1.0, with_library, sol) is None  # a CPU timing is not scored
    run.device = torch.device("cuda")
    assert run._library_score(1.0, with_library, sol) == score_against_library(1.0, 3.0, 0.5)
    assert run._library_score(1.0, BaselineReport("eager", 2.0), sol) is None


@pytest.mark.slow
def test_a_library_that_cannot_start_in_the_sandbox_fails_with_its_reason(tmp_path, monkeypatch):
    """FlashInfer opens a log file in its workspace when imported: where the worker may not
    write there, the import fails before the worker is READY. That is the solution's
    COMPILE_ERROR naming the module and the error, not a bare 'exited with code 1'."""
    site = Path(tempfile.mkdtemp(prefix="solforge-site-"))  # readable by a private uid too
    os.chmod(site, 0o755)
    (site / "flashinfer").mkdir(mode=0o755)
    (site / "flashinfer" / "__init__.py").write_text(
        "raise PermissionError(13, 'Permission denied', '/shared/flashinfer_jit.log')\n")
    os.chmod(site / "flashinfer" / "__init__.py", 0o644)
    monkeypatch.setenv("PYTHONPATH", f"{site}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.syspath_prepend(str(site))  # installed, as the driver sees it
    problem = load_problem(PROBLEMS / "rmsnorm_small")
    solution = replace(_library(problem, "flashinfer", "return run({names})").solution,
                       spec_extra={"dependencies": ["flashinfer"]})
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, limits=short_limits(),
                        cache_dir=tmp_path / "cache")
    try:
        [trace] = evaluate(problem, solution, config)
    finally:
        shutil.rmtree(site)
    assert trace.status is Status.COMPILE_ERROR, trace.evaluation.log
    message = trace.evaluation.log
    assert "importing 'flashinfer', which the solution needs, failed" in message
    assert "PermissionError" in message and "flashinfer_jit.log" in message


def test_library_script_judges_again_the_problems_it_is_told(tmp_path, monkeypatch):
    """`--again TEXT` re-judges the recorded problems whose address has TEXT (FlashInfer's
    RMSNorms, recorded as RUNTIME_ERROR before the sandbox gave it its own workspace); the
    others stay as recorded."""
    script = benchmark_script("library_baselines_gpu")
    out = tmp_path / "lib.json"
    old = [{"problem": p, "library": "x", "workloads": {"w": {"status": "RUNTIME_ERROR"}}}
           for p in ("l1/rmsnorm_llama3_1_8b", "l1/hgemm_fp16")]
    out.write_text(json.dumps({"problems": old}))
    judged = []

    def judge(address, config):
        judged.append(address)
        return {"problem": address, "library": "x", "workloads": {"w": {"status": "PASSED"}}}

    monkeypatch.setattr(script, "judge_problem", judge)
    script.main(["l1/rmsnorm_llama3_1_8b", "l1/hgemm_fp16", "-o", str(out), "--device", "cpu",
                 "--again", "rmsnorm"])
    assert judged == ["l1/rmsnorm_llama3_1_8b"]
    statuses = {r["problem"]: r["workloads"]["w"]["status"]
                for r in json.loads(out.read_text())["problems"]}
    assert statuses == {"l1/rmsnorm_llama3_1_8b": "PASSED", "l1/hgemm_fp16": "RUNTIME_ERROR"}


def test_library_script_leaves_a_flashinfer_baseline_without_its_module_for_later(tmp_path,
                                                                                   monkeypatch):
    """With the flashinfer stage's record, a FlashInfer baseline whose module is not built (or
    failed to build) waits: a sandboxed worker would build it inside its time limit. Other
    libraries, and FlashInfer problems built, are judged."""
    script = benchmark_script("library_baselines_gpu")
    out, setup = tmp_path / "lib.json", tmp_path / "flashinfer-setup.json"
    setup.write_text(json.dumps({"problems": {
        "fib/rope_qwen3_8b": {"first_call_s": 40.0},
        "fib/gqa_ragged_prefill_llama3_1_8b": {"error": "RuntimeError: killed"}}}))
    judged = []

    def judge(address, config):
        judged.append(address)
        return {"problem": address, "library": "x", "workloads": {"w": {"status": "PASSED"}}}

    monkeypatch.setattr(script, "judge_problem", judge)
    asked = ["fib/rope_qwen3_8b", "fib/gqa_ragged_prefill_llama3_1_8b",
             "fib/gqa_paged_decode_llama3_1_8b_ps1", "l1/hgemm_fp16"]
    left = script.main([*asked, "-o", str(out), "--device", "cpu",
                        "--flashinfer-setup", str(setup)])
    assert judged == ["fib/rope_qwen3_8b", "l1/hgemm_fp16"]
    assert left == 3  # problems left for a later call


def test_library_script_starts_no_problem_that_cannot_end_before_its_deadline(tmp_path,
                                                                             monkeypatch):
    """A call killed in the middle of a problem loses it and the baselines it timed (an H200
    call lost a cuDNN block that way): the next problem starts only if one as long as the
    longest so far still ends before the deadline."""
    script = benchmark_script("library_baselines_gpu")
    now = [0.0]
    monkeypatch.setattr(script.time, "monotonic", lambda: now[0])
    judged = []

    def judge(address, config):  # each problem takes 40 s
        judged.append(address)
        now[0] += 40.0
        return {"problem": address, "library": "x", "workloads": {"w": {"status": "PASSED"}}}

    monkeypatch.setattr(script, "judge_problem", judge)
    problems = ["l1/rmsnorm_llama3_1_8b", "l1/rmsnorm_qwen3_32b", "l1/rmsnorm_gemma3_27b"]
    assert script.main([*problems, "-o", str(tmp_path / "lib.json"), "--device", "cpu",
                        "--deadline-s", "100"]) == 3
    assert judged == problems[:2]  # at 80 s, a third (40 s) would end past 100 s


def _script():
    return benchmark_script("library_baselines_gpu")


def test_a_problem_past_its_limit_is_stopped_with_its_processes():
    """--problem-limit-s: the child judging the problem, and its process group, are gone when
    the limit passes (cuDNN SDPA on a paged decode once took a whole H200 call)."""
    script = _script()
    began = time.monotonic()
    with pytest.raises(script.ProblemTooLong, match=r"within 0\.5 s"):  # it is importing torch
        script.judge_within("l1/gemm_llama3_1_8b_qkv", EvalConfig(device="cpu", smallest=1),
                            0.5)
    assert time.monotonic() - began < 30
    leftover = subprocess.run(["pgrep", "-f", "library_baselines_gpu.py --one"],
                              capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_a_problem_stopped_by_its_limit_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    """A problem past its limit is a recorded failure (kept in the file, skipped next time);
    one stopped only because the call's deadline came first is left for the next call."""
    script = _script()
    now = [0.0]
    monkeypatch.setattr(script.time, "monotonic", lambda: now[0])
    limits = []

    def judge(address, config, limit):
        limits.append(limit)
        if address.endswith("qwen3_32b"):
            now[0] += limit
            raise script.ProblemTooLong(f"did not finish within {limit:g} s")
        now[0] += 10.0
        return {"problem": address, "library": "x", "workloads": {"w": {"status": "PASSED"}}}

    monkeypatch.setattr(script, "judge_within", judge)
    out = tmp_path / "lib.json"
    problems = ["l1/rmsnorm_qwen3_32b", "l1/rmsnorm_llama3_1_8b"]
    script.main([*problems, "-o", str(out), "--device", "cpu", "--problem-limit-s", "60",
                 "--deadline-s", "500"])
    done = json.loads(out.read_text())
    assert done["failed"] == {"l1/rmsnorm_qwen3_32b": "did not finish within 60 s"}
    assert [r["problem"] for r in done["problems"]] == ["l1/rmsnorm_llama3_1_8b"]
    assert limits == [60.0, 60.0]

    now[0], limits[:] = 0.0, []  # a deadline nearer than the limit: no failure recorded
    out.unlink()
    script.main([*problems, "-o", str(out), "--device", "cpu", "--problem-limit-s", "60",
                 "--deadline-s", "40"])
    assert limits == [40.0]
    assert not out.exists() or "l1/rmsnorm_qwen3_32b" not in json.loads(out.read_text())["failed"]
