"""Nsight Compute feedback for the LLM proposer: ncu's CSV read into per-kernel metrics, the
command that profiles one call of a candidate (run here against a stand-in `ncu` that checks
its arguments and answers as ncu does), and the metrics reaching the prompt. The real profile
is a `gpu` test."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import TESTS

from solforge.forge import ncu as ncu_module
from solforge.forge.llm.prompt import attempt_block
from solforge.forge.llm.records import LlmAttempt
from solforge.forge.ncu import METRICS, Profile, parse_ncu_csv, profile_solution

ROOT = TESTS
PROBLEM = ROOT / "fixtures" / "harness" / "rmsnorm_small"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')


def _row(launch: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return (f'"{launch}","4242","python3","host","{kernel}","1","7","(256, 1, 1)",'
            f'"(8192, 1, 1)","0","9.0","Command line profiler metrics","{metric}","{unit}",'
            f'"{value}"')


def _report() -> str:
    """What `ncu --csv --print-units base` prints for two launches, after the program's own
    output and ncu's messages."""
    values = [("gpu__time_duration.sum", "nsecond", "31,456"),
              ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "88.2"),
              ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "21.5"),
              ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "47.9"),
              ("launch__registers_per_thread", "register/thread", "40"),
              ("lts__t_sector_hit_rate.pct", "%", "12.3")]
    rows = [_row(0, "_rmsnorm_row", *value) for value in values]
    rows.append(_row(1, "_finish", "gpu__time_duration.sum", "usecond", "2.5"))
    rows.append(_row(1, "_finish", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%",
                     "n/a"))
    return "\n".join(["program output", "==PROF== Disconnected from process 4242", HEADER,
                      *rows]) + "\n"


def test_ncu_csv_becomes_per_kernel_metrics():
    first, second = parse_ncu_csv(_report())
    assert first.name == "_rmsnorm_row"
    assert first.duration_us == pytest.approx(31.456)  # nanoseconds, thousands separator
    assert (first.dram_pct, first.sm_pct, first.occupancy_pct) == (88.2, 21.5, 47.9)
    assert (first.registers, first.l2_hit_pct) == (40.0, 12.3)
    assert second.name == "_finish" and second.duration_us == pytest.approx(2.5)
    assert second.dram_pct is None  # "n/a" is no number
    assert parse_ncu_csv("==ERROR== no kernels were profiled\n") == ()


def test_feedback_lists_the_longest_kernels_first():
    text = Profile(parse_ncu_csv(_report())).feedback()
    lines = text.splitlines()
    assert lines[0] == "Nsight Compute, one call:"
    assert lines[1] == ("- _rmsnorm_row: 31.5 us, DRAM throughput 88%, SM throughput 22%, "
                        "achieved occupancy 48%, 40 registers/thread, L2 hit rate 12%")
    assert lines[2] == "- _finish: 2.5 us"
    assert "could not profile it: boom" in Profile(error="boom").feedback()


def _fake_ncu(folder: Path, exit_code: int) -> None:
    """An `ncu` that checks what solforge asks of it and writes the canned report."""
    script = folder / "ncu"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        args = sys.argv[1:]
        # interpreted, the candidate's Triton kernels would launch nothing to profile
        assert "TRITON_INTERPRET" not in os.environ, "TRITON_INTERPRET reached the candidate"
        assert args[args.index("--profile-from-start") + 1] == "off", args
        assert args[args.index("--metrics") + 1] == {",".join(METRICS)!r}, args
        assert "--csv" in args and args[args.index("--print-units") + 1] == "base"
        child = args[args.index("-m") + 1:]
        assert child[0] == "solforge.forge.ncu", child
        request = json.load(open(child[1]))
        assert request["workload"] == "w-1" and request["solution"]["name"] == "cand"
        if {exit_code}:
            print("==ERROR== Failed to profile: permission denied (ERR_NVGPUCTRPERM)")
            sys.exit({exit_code})
        open(args[args.index("--log-file") + 1], "w").write({_report()!r})
        """))
    script.chmod(0o755)


@pytest.mark.parametrize("exit_code", [0, 1])
def test_the_profile_command_and_its_failure(tmp_path, monkeypatch, exit_code):
    _fake_ncu(tmp_path, exit_code)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    profile = profile_solution({"name": "cand"}, PROBLEM, "w-1", timeout_s=60)
    if exit_code == 0:
        assert profile.error is None and [k.name for k in profile.kernels] == [
            "_rmsnorm_row", "_finish"]
    else:
        assert profile.kernels == () and "exit code 1" in profile.error
        assert "ERR_NVGPUCTRPERM" in profile.error


def test_the_profiled_candidate_cannot_reach_the_drivers_files(tmp_path, monkeypatch):
    """ncu runs the candidate's code: both run in a sandbox, so a write outside their own
    folders is refused and the baseline key's path is not in their environment."""
    tools, driver = tmp_path / "tools", tmp_path / "driver"
    tools.mkdir()
    driver.mkdir(mode=0o700)
    script = tools / "ncu"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os
        try:
            open({str(driver / "escaped")!r}, "w").write("escaped")
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
        print("key", os.environ.get("SOLFORGE_BASELINE_KEY"))
        raise SystemExit(1)
        """))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SOLFORGE_BASELINE_KEY", str(driver / "key"))
    profile = profile_solution({"name": "cand"}, PROBLEM, "w-1", timeout_s=60)
    assert "refused" in profile.error and "key None" in profile.error, profile.error
    assert not (driver / "escaped").exists()


def test_without_ncu_there_is_no_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert profile_solution({"name": "cand"}, PROBLEM, "w-1").error == "ncu is not on PATH"


def test_the_metrics_reach_the_prompt():
    feedback = Profile(parse_ncu_csv(_report())).feedback()
    attempt = LlmAttempt(solution="cand", status="PASSED", workloads=1, passed=1, latency_ms=0.03,
                         baseline_ms=0.05, profile=feedback)
    block = attempt_block(attempt, with_source=False)
    assert "DRAM throughput 88%" in block and "Nsight Compute, one call:" in block
    assert "Nsight" not in attempt_block(LlmAttempt(solution="x", status="PASSED"), False)


def test_only_the_models_passing_candidates_on_a_gpu_are_profiled(tmp_path, monkeypatch):
    from solforge.forge.loop import OptimizeConfig, Optimizer
    from solforge.problem import load_problem
    from solforge.store import Store

    problem = load_problem(PROBLEM)
    store = Store(f"sqlite:///{tmp_path / 'forge.db'}")

    def optimizer(**config) -> Optimizer:
        return Optimizer(problem, store, OptimizeConfig(**config), lambda line: None)

    _fake_ncu(tmp_path, 0)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert optimizer(device="cuda")._profiles("llm:model")
    assert not optimizer(device="cuda")._profiles("template:gemm")  # no model reads it
    assert not optimizer(device="cuda", ncu=False)._profiles("llm:model")
    assert not optimizer(device="cpu")._profiles("llm:model")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert not optimizer(device="cuda")._profiles("llm:model")


@pytest.mark.gpu
def test_a_triton_rmsnorm_is_profiled_on_the_gpu():
    import shutil

    import torch

    if not torch.cuda.is_available() or shutil.which("ncu") is None:
        pytest.skip("needs a CUDA GPU and ncu")
    problem = ROOT.parent / "src" / "solforge" / "problems" / "l1" / "rmsnorm_llama3_1_8b"
    solution = json.loads((ROOT / "fixtures" / "harness" / "honest" / "triton_rmsnorm" /
                           "solution.json").read_text())
    workload = json.loads((problem / "workload.jsonl").read_text().splitlines()[-1])
    profile = profile_solution(solution, problem, workload["uuid"])
    assert profile.error is None, profile.error
    assert profile.kernels and all(k.duration_us and k.duration_us > 0 for k in profile.kernels)
    assert any(k.dram_pct is not None for k in profile.kernels)


def test_an_empty_report_says_what_ncu_said():
    """The sandbox's user may not read the counters where the driver restricts them to admins;
    ncu then profiles nothing, and the feedback must say why, not guess."""
    denied = "==PROF== Connected to process 7\n==ERROR== ERR_NVGPUCTRPERM - The user does not"
    assert "administrators only" in ncu_module._no_kernel_reason(denied)
    other = "==PROF== Connected to process 7\n==WARNING== No kernels were profiled.\n"
    assert ncu_module._no_kernel_reason(other).endswith("==WARNING== No kernels were profiled.")
    assert ncu_module._no_kernel_reason("") == "ncu profiled no kernel in the call"
