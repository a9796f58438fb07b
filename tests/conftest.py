"""Test configuration: the one GPU-skip hook and the fixtures every package's tests share.

Tests that need a CUDA GPU carry `@pytest.mark.gpu` and nothing else; the hook below skips
them on a machine without one. `benchmarks/run_gpu_checks.sh` runs them with `-m gpu`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import write_problem

# Triton kernels in the tests run in Triton's interpreter on the CPU.
os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def make_problem(tmp_path):
    def make(definition: dict[str, Any], workloads: list[dict[str, Any]],
             name: str = "problem") -> Path:
        return write_problem(tmp_path / name, definition, workloads)

    return make
