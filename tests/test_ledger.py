"""The tests' ledger (ledger.py): a run goes on where an earlier run of the same code stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ledger
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIRST = "tests/measure/test_timing.py::test_summary_statistics"
SECOND = "tests/measure/test_timing.py::test_flush_buffer_is_twice_the_l2"
HANGS = "tests/measure/test_timing.py::test_device_methods_need_cuda"


def _pytest(ledger_path: Path, *nodes: str) -> str:
    env = {**os.environ, ledger.ENV: str(ledger_path)}
    finished = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *nodes], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode in (0, 5), finished.stdout[-2000:]  # 5: every test left out
    return finished.stdout


@pytest.mark.slow
def test_a_second_run_leaves_out_what_the_first_ran_and_what_hung_twice(tmp_path):
    path = tmp_path / "ledger.jsonl"
    code = ledger.fingerprint()
    _pytest(path, FIRST)
    outcomes, stuck = ledger.settled(ledger.entries(path, code))
    assert outcomes == {FIRST: "passed"} and stuck == []
    for _ in range(ledger.STARTS_BEFORE_LEFT_OUT):  # two runs killed while it ran
        ledger.append(path, {"code": code, "node": HANGS, "outcome": ledger.STARTED})
    with path.open("a") as stream:
        stream.write('{"code": "' + code + '", "node": "cut off mid-wr')  # a killed write
    again = _pytest(path, FIRST, SECOND, HANGS)
    assert "2 tests already run on this code left out (1 of them stuck), 1 to run" in again
    outcomes, stuck = ledger.settled(ledger.entries(path, code))
    assert outcomes == {FIRST: "passed", SECOND: "passed"} and stuck == [HANGS]
    assert f"stuck (started 2 times, never finished): {HANGS}" in ledger.summary(path, code)


def test_another_code_starts_from_nothing(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps({"code": "another", "node": FIRST, "outcome": "passed"}) + "\n")
    assert ledger.entries(path, ledger.fingerprint()) == []
    assert ledger.entries(tmp_path / "none.jsonl", "x") == []


def test_the_fingerprint_follows_every_source_file(tmp_path):
    for name in ("src/pkg/a.py", "tests/t.py", "src/pkg/__pycache__/a.cpython-312.pyc"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    before = ledger.fingerprint(tmp_path)
    (tmp_path / "src/pkg/__pycache__/a.cpython-312.pyc").write_text("changed")
    assert ledger.fingerprint(tmp_path) == before
    (tmp_path / "tests/t.py").write_text("x = 2\n")
    assert ledger.fingerprint(tmp_path) != before
