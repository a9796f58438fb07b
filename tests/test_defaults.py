"""Run defaults come from one function (solforge.defaults.resolve_run) for every command: the
device, the profile T_SOL is priced on, and the baseline."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass

import pytest
import torch
from helpers import FIXTURES
from typer.testing import CliRunner

from solforge.cli import app
from solforge.defaults import resolve_run
from solforge.errors import SolforgeError
from solforge.forge.loop import OptimizeConfig, Optimizer
from solforge.hardware import load_profile
from solforge.hardware.profile import HardwareProfile
from solforge.problem import load_problem

PROBLEM = FIXTURES / "harness" / "rmsnorm_small"
SOLUTION = FIXTURES / "harness" / "honest" / "pytorch_rmsnorm" / "solution.py"


class Captured(Exception):
    """Raised by a stand-in for the command's work, carrying the settings it was given."""

    def __init__(self, config) -> None:
        super().__init__("captured")
        self.config = config


def _capture(problem, candidate_or_store, config, *args, **kwargs):
    """Stands in for evaluate(problem, solution, config) and run_bench(problems, store, config)."""
    raise Captured(config)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_defaults(no_gpu):
    run = resolve_run()
    assert (run.device, run.device_type, run.hardware, run.baseline) == ("cpu", "cpu", None,
                                                                          "eager")


def test_a_ray_run_defaults_to_the_gpu_without_one_here(no_gpu):
    run = resolve_run(remote=True)
    assert (run.device_type, run.baseline) == ("cuda", "best")


def test_analyze_prices_on_the_profile_resolve_run_gives(no_gpu):
    assert resolve_run().profile() == load_profile("H200")  # CPU mode: the H200
    assert resolve_run(hardware="B200").profile() == load_profile("B200")
    result = CliRunner().invoke(app, ["analyze", str(PROBLEM), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[0])["hardware"] == load_profile("H200").name


def test_given_settings_are_kept(no_gpu):
    run = resolve_run("cpu", "B200@1500MHz", "compile")
    assert (run.hardware, run.baseline) == ("B200@1500MHz", "compile")


@pytest.mark.parametrize("device, baseline, message", [
    ("tpu", None, "unsupported device 'tpu'"),
    ("cuda", None, "no CUDA device"),
    ("cpu", "fastest", "unknown baseline 'fastest'"),
])
def test_bad_settings_are_one_line_errors(no_gpu, device, baseline, message):
    with pytest.raises(SolforgeError, match=message):
        resolve_run(device, None, baseline)


def _eval_config(monkeypatch, *options: str):
    monkeypatch.setattr(importlib.import_module("solforge.harness.evaluate"), "evaluate", _capture)
    result = CliRunner().invoke(app, ["eval", str(PROBLEM), str(SOLUTION),
                                      *options])
    assert isinstance(result.exception, Captured), result.output
    return result.exception.config


def _bench_config(monkeypatch, tmp_path, *options: str):
    monkeypatch.setattr("solforge.bench.run.run_bench", _capture)
    result = CliRunner().invoke(app, ["bench", str(PROBLEM), "--no-bundled",
                                      "--db", f"sqlite:///{tmp_path / 'bench.db'}", *options])
    assert isinstance(result.exception, Captured), result.output
    return result.exception.config


@pytest.mark.parametrize("options", [(), ("--device", "cpu")])
def test_eval_and_bench_default_to_the_same_baseline(monkeypatch, tmp_path, no_gpu, options):
    """eval used to take "best" on the CPU while bench took "eager"."""
    evaluated = _eval_config(monkeypatch, *options)
    benched = _bench_config(monkeypatch, tmp_path, *options)
    assert evaluated.baseline == benched.baseline == resolve_run(*options[1:]).baseline
    assert evaluated.device == benched.device == "cpu"


@dataclass(frozen=True)
class _Machine:
    profile: HardwareProfile
    device_type: str = "cuda"


@dataclass(frozen=True)
class _Runner:
    machine: _Machine
    slots: int = 1


@pytest.mark.parametrize("hardware, expected", [(None, "B200"), ("H100", "H100")])
def test_optimize_prices_t_sol_on_the_gpu_its_runner_has(tmp_path, hardware, expected):
    """Without --hardware, optimize priced the LLM prompt's T_SOL on the H200 while fitness
    was scored on the GPU present; both now use the runner's GPU (or the one named)."""
    from solforge.store import Store

    present = _Runner(_Machine(load_profile("B200")))
    config = OptimizeConfig(budget=1, device="cuda", hardware=hardware)
    optimizer = Optimizer(load_problem(PROBLEM), Store(f"sqlite:///{tmp_path / 'f.db'}"),
                          config, print, runner=present, address=str(PROBLEM))
    assert optimizer._profile() == load_profile(expected)
