"""benchmarks/variants_gpu.py in CPU mode, and the numerics of the FP8 quantiser variants."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "variants_gpu.py"
PER_TOKEN = "quant/fp8_quant_per_token_llama3_1_8b_down"


def test_the_variants_script_checks_times_and_records_every_candidate(tmp_path):
    out = tmp_path / "variants.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "-o", str(out),
                           f"{PER_TOKEN}=fp8_quant_per_token"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["problems"][PER_TOKEN]
    assert row["failed"] == {}
    names = set(row["times"])
    assert {"eager", "markstein_w16", "two_pass_2048_w4"} <= names
    assert any(name.startswith("shipped:") for name in names)
    assert all(entry["median_ms"] > 0 for entry in row["times"].values())


@pytest.fixture
def triton_interpreter(monkeypatch):
    triton = pytest.importorskip("triton")
    monkeypatch.setattr(triton.knobs.runtime, "interpret", True)
    sys.path.insert(0, str(REPO / "benchmarks" / "variants"))
    yield
    sys.path.remove(str(REPO / "benchmarks" / "variants"))


def test_the_fma_corrected_quotient_is_the_ieee_quotient_where_a_reciprocal_is_not(
        triton_interpreter):
    """N(0, 1) bfloat16 over a scale lands on e4m3 midpoints often: the multiply by the
    reciprocal moves codes that Markstein's correction (x * y, then one FMA step) does not."""
    import fp8_quant_group128
    torch.manual_seed(3)
    x = torch.randn(3, 7168).to(torch.bfloat16)
    groups = x.float().view(3, 56, 128)
    scale = torch.clamp(groups.abs().amax(dim=2), min=1e-4) / torch.tensor(448.0)
    ieee = (groups / scale[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(3, 7168)
    reciprocal = (groups * (1 / scale[..., None])).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert not torch.equal(reciprocal.view(3, 7168).view(torch.uint8), ieee.view(torch.uint8))
    for run in fp8_quant_group128.VARIANTS.values():
        codes = torch.empty_like(ieee)
        scales = torch.empty(3, 56)
        run(x, codes, scales)
        assert torch.equal(codes.view(torch.uint8), ieee.view(torch.uint8))
        assert torch.equal(scales, scale)


def _swiglu_mlp_reference(x, gate_w, up_w, down_w):
    gate, up = x @ gate_w.T, x @ up_w.T
    return (torch.nn.functional.silu(gate) * up) @ down_w.T


@pytest.mark.parametrize("tokens", [1, 2, 3, 80])
def test_every_swiglu_mlp_variant_matches_the_reference_where_it_runs(triton_interpreter,
                                                                       tokens):
    """The decode GEMV (1-2 tokens), the fused gate/up kernel and the cuBLAS + Triton SwiGLU
    path, alone and as the composite's choice by token count, on a small MLP in bfloat16."""
    import swiglu_mlp
    torch.manual_seed(tokens)
    hidden, intermediate = 1024, 384
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    weights = [(torch.randn(*shape) / shape[1] ** 0.5).to(torch.bfloat16)
               for shape in ((intermediate, hidden), (intermediate, hidden),
                             (hidden, intermediate))]
    expected = _swiglu_mlp_reference(x, *weights).float()
    for name, run in swiglu_mlp.VARIANTS.items():
        out = torch.empty(tokens, hidden, dtype=torch.bfloat16)
        if name == "gemv_gate_up_cublas_down" and tokens > swiglu_mlp.GEMV_MAX_TOKENS:
            with pytest.raises(ValueError, match="GEMV path takes 1 to 2 tokens"):
                run(x, *weights, out)
            continue
        run(x, *weights, out)
        assert torch.allclose(out.float(), expected, atol=2e-2, rtol=2e-2), name
