"""Test configuration: the one GPU-skip hook and the fixtures every package's tests share.

Tests that need a CUDA GPU carry `@pytest.mark.gpu` and nothing else; the hook below skips
them on a machine without one. `benchmarks/run_gpu_checks.sh` runs them with `-m gpu`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import ledger
import numpy as np
import pytest
import torch
import triton_mode
from helpers import write_problem

_LEDGER = pytest.StashKey[tuple[Path, str] | None]()


def pytest_configure(config: pytest.Config) -> None:
    """Triton kernels run in Triton's interpreter on the CPU, and compiled in a GPU-only run on
    a GPU (triton_mode.py); set before any test module decorates one. With
    SOLFORGE_TESTS_LEDGER set, outcomes go to that ledger and a later run of the same code goes
    on where this one stopped (ledger.py)."""
    if triton_mode.interprets(config.getoption("markexpr") or "", torch.cuda.is_available()):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    path = os.environ.get(ledger.ENV)
    config.stash[_LEDGER] = (Path(path), ledger.fingerprint()) if path else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _leave_out_what_the_ledger_holds(config, items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def _leave_out_what_the_ledger_holds(config: pytest.Config, items: list[pytest.Item]) -> None:
    held = config.stash[_LEDGER]
    if held is None:
        return
    outcomes, stuck = ledger.settled(ledger.entries(*held))
    done = set(outcomes) | set(stuck)
    dropped = [item for item in items if item.nodeid in done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in done]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"ledger {held[0]}: {len(dropped)} tests already run on this code "
                            f"left out ({len(stuck)} of them stuck), {len(items)} to run")


def pytest_runtest_setup(item: pytest.Item) -> None:
    held = item.config.stash[_LEDGER]
    if held is not None:
        ledger.append(held[0], {"code": held[1], "node": item.nodeid, "outcome": ledger.STARTED})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    made = yield
    report = made.get_result()
    held = item.config.stash[_LEDGER]
    if held is not None and (report.when == "call" or (report.when == "setup"
                                                       and not report.passed)):
        ledger.append(held[0], {"code": held[1], "node": item.nodeid, "outcome": report.outcome,
                                "seconds": round(report.duration, 3)})


@pytest.fixture(autouse=True)
def same_random_state_every_run():
    """Each test starts from one random state (torch, Python, NumPy): data that a check happens
    to fail fails on every run, never once in a few hundred CI runs (a bfloat16 collision did
    that to a submission). Worker processes draw from their own seeds, untouched by this."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture
def make_problem(tmp_path):
    def make(definition: dict[str, Any], workloads: list[dict[str, Any]],
             name: str = "problem") -> Path:
        return write_problem(tmp_path / name, definition, workloads)

    return make
