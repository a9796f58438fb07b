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


def _fake_gpu(monkeypatch, tmp_path, script, outcomes):
    """main() on the CPU: a CUDA device claimed, FlashInfer's folders in tmp_path, and each
    problem's first call answered from `outcomes` (address -> its result), in the order asked."""
    calls = []
    env = types.SimpleNamespace(FLASHINFER_JIT_DIR=tmp_path / "jit",
                                FLASHINFER_AOT_DIR=tmp_path / "aot")
    package = types.ModuleType("flashinfer")
    package.__version__ = "0.7.4"
    package.jit = types.ModuleType("flashinfer.jit")
    package.jit.env = env
    for name, module in (("flashinfer", package), ("flashinfer.jit", package.jit),
                         ("flashinfer.jit.env", env)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(script.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "recorded_environment", lambda device: {"gpu": "test"})

    def first_call(address):
        calls.append(address)
        return outcomes[address]

    monkeypatch.setattr(script, "first_call", first_call)
    return calls


def test_the_setup_goes_on_from_its_record_and_tries_a_failed_build_again(tmp_path, monkeypatch):
    """The record is written after every problem (a call stopped by its limit keeps it); the
    next run skips what was built and tries again what failed."""
    script = _script()
    out = tmp_path / "setup.json"
    asked = ["fib/rope_qwen3_8b", "fib/gqa_ragged_prefill_llama3_1_8b"]
    outcomes = {asked[0]: {"first_call_s": 40.0}, asked[1]: {"error": "RuntimeError: ninja"}}
    calls = _fake_gpu(monkeypatch, tmp_path, script, outcomes)
    monkeypatch.setattr(sys, "argv", ["flashinfer_setup.py", *asked, "-o", str(out)])
    assert script.main() == 1
    record = json.loads(out.read_text())
    assert record["problems"] == outcomes and record["complete"] is False
    outcomes[asked[1]] = {"first_call_s": 300.0}
    assert script.main() == 0
    assert calls == [*asked, asked[1]]
    assert json.loads(out.read_text())["complete"] is True


def test_the_setup_starts_no_build_that_cannot_end_before_its_deadline(tmp_path, monkeypatch):
    script = _script()
    out = tmp_path / "setup.json"
    asked = ["fib/rope_qwen3_8b", "fib/rope_deepseek_v3"]
    calls = _fake_gpu(monkeypatch, tmp_path, script,
                      {address: {"first_call_s": 1.0} for address in asked})
    # began; problem 1's check, start and end; problem 2's check
    clock = iter([0.0, 0.0, 0.0, 100.0, 150.0])
    monkeypatch.setattr(script.time, "monotonic", lambda: next(clock, 150.0))
    monkeypatch.setattr(sys, "argv", ["flashinfer_setup.py", *asked, "-o", str(out),
                                      "--deadline-s", "200"])
    assert script.main() == 1  # 150 s gone + the 100 s the first build took > 200 s
    assert calls == asked[:1]
    assert json.loads(out.read_text())["complete"] is False


def test_the_record_names_the_modules_compiled_on_the_cpu_machine(tmp_path, monkeypatch):
    """The flashinfer stage installed carry_flashinfer_aot.sh's modules with their manifest;
    the record lists them, apart from what this machine built."""
    script = _script()
    out = tmp_path / "setup.json"
    _fake_gpu(monkeypatch, tmp_path, script, {"fib/rope_qwen3_8b": {"first_call_s": 0.4}})
    monkeypatch.setattr(sys, "argv", ["flashinfer_setup.py", "fib/rope_qwen3_8b", "-o", str(out)])
    assert script.main() == 0
    assert json.loads(out.read_text())["prebuilt"] == []
    (tmp_path / "aot").mkdir()
    (tmp_path / "aot" / "flashinfer-aot.json").write_text(
        json.dumps({"flashinfer": "0.7.4", "modules": ["rope", "sampling"]}))
    assert script.main() == 0
    record = json.loads(out.read_text())
    assert record["prebuilt"] == ["rope", "sampling"] and record["installed_ahead_of_time"] == []
