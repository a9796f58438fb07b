"""The tests' Triton mode: interpreted on the CPU, compiled in a GPU-only run on a GPU."""

from __future__ import annotations

import os

import pytest
import torch
import triton_mode


@pytest.mark.parametrize(("markexpr", "has_gpu", "interprets"), [
    ("gpu", True, False),  # run_gpu_checks.sh's run: the kernels compiled for the GPU
    (" gpu ", True, False),
    ("gpu", False, True),  # no GPU: every test is skipped, nothing to compile for
    ("not gpu", True, True),  # CI's run and the CPU tests on a GPU machine
    ("", True, True),  # every test: the CPU ones need the interpreter
    ("gpu or slow", True, True),
])
def test_kernels_compile_only_in_a_gpu_only_run_on_a_gpu(markexpr, has_gpu, interprets):
    assert triton_mode.interprets(markexpr, has_gpu) is interprets


def test_this_cpu_run_interprets():
    if torch.cuda.is_available():
        pytest.skip("a CPU-only machine's setting")
    assert os.environ.get("TRITON_INTERPRET") == "1"
