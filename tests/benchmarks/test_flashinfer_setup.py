"""benchmarks/flashinfer_setup.py: which baselines it builds, and the modules it installs ahead
of time for the sandboxed workers."""

from __future__ import annotations

import json
import sys
import types

import fake_flashinfer
from helpers import benchmark_script


def _script():
    return benchmark_script("flashinfer_setup")


def test_every_flashinfer_baseline_of_the_suite_is_built_unless_recorded(tmp_path):
    found = _script().flashinfer_problems()
    assert {"l1/rmsnorm_llama3_1_8b", "fib/rope_qwen3_8b", "fib/top_k_renorm_probs_deepseek_v3",
            "fib/gqa_paged_decode_llama3_1_8b_ps1"} <= set(found)
    assert "l1/gemm_llama3_1_8b_qkv" not in found  # cuBLASLt, not FlashInfer
    record = tmp_path / "library-baselines.json"
    record.write_text(json.dumps({"problems": [{"problem": "l1/rmsnorm_llama3_1_8b"}]}))
    left = _script().flashinfer_problems(record)
    assert set(left) == set(found) - {"l1/rmsnorm_llama3_1_8b"}


def test_built_modules_are_installed_ahead_of_time(tmp_path, monkeypatch):
    jit, aot = tmp_path / "jit", tmp_path / "aot"
    for name in ("norm", "batch_decode_bf16"):
        (jit / name).mkdir(parents=True)
        (jit / name / f"{name}.so").write_bytes(name.encode())
    (jit / "half_built").mkdir()
    (jit / "half_built" / "other.so").write_bytes(b"not the module")  # not <name>/<name>.so
    env = types.SimpleNamespace(FLASHINFER_JIT_DIR=jit, FLASHINFER_AOT_DIR=aot)
    package = types.ModuleType("flashinfer")
    package.jit = types.ModuleType("flashinfer.jit")
    package.jit.env = env
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", package.jit)
    monkeypatch.setitem(sys.modules, "flashinfer.jit.env", env)
    assert _script().install_ahead_of_time() == ["batch_decode_bf16", "norm"]
    assert (aot / "norm" / "norm.so").read_bytes() == b"norm"
    assert not (aot / "half_built").exists()


def test_each_baseline_is_called_once_and_a_failure_is_recorded(monkeypatch):
    """The first call runs the baseline's own generated code (here through the stand-in, on
    the CPU); one that raises is recorded with its error, not raised."""
    fake_flashinfer.install(monkeypatch)
    script = _script()
    assert "first_call_s" in script.first_call("fib/gqa_paged_decode_llama3_1_8b_ps1", "cpu")
    assert "first_call_s" in script.first_call("l1/rmsnorm_gemma3_27b", "cpu")
    monkeypatch.delattr(sys.modules["flashinfer"], "norm")
    failed = script.first_call("l1/rmsnorm_llama3_1_8b", "cpu")
    assert failed["baseline"] == "flashinfer-rmsnorm" and "AttributeError" in failed["error"]
