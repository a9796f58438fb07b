"""Compiles ahead lower their own CPU priority (harness/niceness.py), so the timed loops beside
them keep the cores; a bad setting is refused before any starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from solforge.errors import SolforgeError
from solforge.forge import capture
from solforge.harness import compile_ahead, niceness
from solforge.problem import open_problem


class _Lowered(Exception):
    pass


def test_the_default_the_override_and_the_refusals(monkeypatch):
    monkeypatch.delenv(niceness.ENV, raising=False)
    assert niceness.compile_nice() == niceness.DEFAULT == 10
    monkeypatch.setenv(niceness.ENV, " 0 ")
    assert niceness.compile_nice() == 0
    for bad in ("-1", "20", "ten", "1.5"):
        monkeypatch.setenv(niceness.ENV, bad)
        with pytest.raises(SolforgeError, match=niceness.ENV):
            niceness.compile_nice()


def test_a_process_that_lowers_its_priority_runs_at_the_niceness_asked(monkeypatch):
    code = ("import os; from solforge.harness.niceness import lower_priority; "
            "before = os.nice(0); print(lower_priority() - before)")
    for value, expected in (("7", 7), ("0", 0)):
        env = {**os.environ, niceness.ENV: value}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60, check=True)
        assert int(done.stdout) == min(expected, 19 - os.nice(0))


@pytest.mark.parametrize("entry", ["capture", "compile_ahead"])
def test_each_compile_ahead_lowers_its_priority_before_anything_else(entry, monkeypatch):
    def lowered() -> int:
        raise _Lowered

    module = capture if entry == "capture" else compile_ahead
    monkeypatch.setattr(module, "lower_priority", lowered)
    with pytest.raises(_Lowered):  # before it reads its (missing) request
        if entry == "capture":
            capture._capture_main("/nonexistent/request.json", "/nonexistent/result.json")
        else:
            compile_ahead.main(["/nonexistent/share.json", "cpu", "/nonexistent/result.json"])


def test_a_bad_setting_is_refused_before_a_compile_ahead_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(niceness.ENV, "high")
    problem = open_problem("l1/rmsnorm_llama3_1_8b")
    with pytest.raises(SolforgeError, match=niceness.ENV):
        compile_ahead.start_compile_ahead(problem, list(problem.workloads[:1]),
                                          torch.device("cpu"), tmp_path, {})
    assert not any(tmp_path.iterdir())  # nothing started, no folder made
