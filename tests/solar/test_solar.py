"""The speed-of-light analyzer: counts against torch's FlopCounterMode and against hand derivations.

Every expected number below is derived in the test from the problem's sizes, so a change in the
analyzer's counting rules shows up as a failure here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from solforge.hardware import load_profile
from solforge.problem import load_problem
from solforge.solar import analyze_workload, sol_floor_ms, trace_reference
from solforge.solar.costs import causal_pairs

H200 = load_profile("H200")


def definition(name: str, axes: dict, inputs: dict, outputs: dict, reference: str,
               **extra) -> dict:
    def spec(entry):
        shape, dtype = entry
        return {"shape": shape, "dtype": dtype}

    return {"name": name, "op_type": name,
            "axes": {k: ({"type": "var"} if v is None else {"type": "const", "value": v})
                     for k, v in axes.items()},
            "inputs": {k: spec(v) for k, v in inputs.items()},
            "outputs": {k: spec(v) for k, v in outputs.items()},
            "reference": reference, **extra}


def analyze(make_problem, spec: dict, axes: dict, **kwargs):
    problem = load_problem(make_problem(spec, [{"axes": axes}]))
    return analyze_workload(problem, problem.workloads[0], H200, **kwargs), problem


def torch_flops(problem, dtype_inputs: dict[str, torch.Tensor], run_source: str) -> int:
    """FLOPs torch's own counter gives for the same call on meta tensors."""
    namespace: dict = {}
    exec(run_source, namespace)
    with FlopCounterMode(display=False) as counter:
        namespace["run"](*dtype_inputs.values())
    return counter.get_total_flops()


# ---- agreement with torch's FlopCounterMode where it counts ------------------------------------

PRODUCT_CASES = [
    ("mm", "def run(a, b):\n    return a @ b\n",
     {"a": [("M", "K"), "bfloat16"], "b": [("K", "N"), "bfloat16"]}, [("M", "N"), "bfloat16"]),
    ("linear_bias", "import torch\ndef run(a, w, bias):\n"
                    "    return torch.nn.functional.linear(a, w, bias)\n",
     {"a": [("M", "K"), "float16"], "w": [("N", "K"), "float16"], "bias": [("N",), "float16"]},
     [("M", "N"), "float16"]),
    ("bmm", "import torch\ndef run(a, b):\n    return torch.bmm(a, b)\n",
     {"a": [("B", "M", "K"), "bfloat16"], "b": [("B", "K", "N"), "bfloat16"]},
     [("B", "M", "N"), "bfloat16"]),
    ("baddbmm", "import torch\ndef run(c, a, b):\n    return torch.baddbmm(c, a, b)\n",
     {"c": [("B", "M", "N"), "float32"], "a": [("B", "M", "K"), "float32"],
      "b": [("B", "K", "N"), "float32"]}, [("B", "M", "N"), "float32"]),
    ("conv2d", "import torch\ndef run(x, w):\n"
               "    return torch.nn.functional.conv2d(x, w, padding=1, stride=2, groups=2)\n",
     {"x": [("B", "C", "M", "M"), "bfloat16"], "w": [("N", "G", "K3", "K3"), "bfloat16"]},
     [("B", "N", "P", "P"), "bfloat16"]),
]


@pytest.mark.parametrize(("name", "reference", "inputs", "output"), PRODUCT_CASES,
                         ids=[c[0] for c in PRODUCT_CASES])
def test_tensor_core_flops_match_torch_flop_counter(make_problem, name, reference, inputs,
                                                    output):
    sizes = {"M": 48, "N": 40, "K": 24, "B": 3, "C": 4, "G": 2, "K3": 3, "P": 24}
    spec = definition(name, {k: v for k, v in sizes.items()},
                      {k: [list(v[0]), v[1]] for k, v in inputs.items()},
                      {"out": [list(output[0]), output[1]]}, reference)
    spec["axes"]["M"] = {"type": "var"}
    result, problem = analyze(make_problem, spec, {"M": 48})
    meta = {k: torch.empty([sizes[a] for a in v[0]], dtype=getattr(torch, v[1]), device="meta")
            for k, v in inputs.items()}
    expected = torch_flops(problem, meta, reference)
    assert expected > 0
    assert result.tensor_core_flops == expected


# ---- hand derivations ------------------------------------------------------------------------

def test_causal_pairs_follow_pytorch_top_left_alignment():
    assert causal_pairs(128, 128) == 128 * 129 // 2
    assert causal_pairs(4, 6) == 1 + 2 + 3 + 4  # query i sees keys 0..i
    assert causal_pairs(6, 4) == 1 + 2 + 3 + 4 + 4 + 4
    mask = torch.ones(6, 4, dtype=torch.bool).tril()
    assert causal_pairs(6, 4) == int(mask.sum())


SDPA_REFERENCE = """import torch
import torch.nn.functional as F

def run(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal={causal}, enable_gqa=True)
"""


@pytest.mark.parametrize("causal", [True, False])
def test_gqa_attention_flops_and_bytes(make_problem, causal):
    b, hq, hkv, s, d = 2, 8, 2, 128, 64
    spec = definition(
        "gqa", {"B": None, "HQ": hq, "HKV": hkv, "S": None, "D": d},
        {"q": [["B", "HQ", "S", "D"], "bfloat16"], "k": [["B", "HKV", "S", "D"], "bfloat16"],
         "v": [["B", "HKV", "S", "D"], "bfloat16"]},
        {"o": [["B", "HQ", "S", "D"], "bfloat16"]}, SDPA_REFERENCE.format(causal=causal))
    result, _ = analyze(make_problem, spec, {"B": b, "S": s})
    pairs = b * hq * (s * (s + 1) // 2 if causal else s * s)
    # Q K^T and P V: 2 FLOPs per multiply-add, D each, per kept query-key pair
    assert result.flops["tensor.bf16"] == 2 * pairs * d + 2 * pairs * d
    assert result.flops["simt.fp32"] == 5 * pairs  # softmax: scale, max, subtract, exp, sum
    # fused: q and o at HQ heads, k and v at HKV heads (GQA shares them), 2 bytes each
    assert result.bytes_fused == 2 * (2 * b * hq * s * d + 2 * b * hkv * s * d)
    assert result.ops[0].op == "solforge.sdpa"


SWIGLU_REFERENCE = """import torch

def run(x, gate_proj, up_proj, down_proj):
    gate = x @ gate_proj.T
    up = x @ up_proj.T
    hidden = torch.nn.functional.silu(gate.float()) * up.float()
    return (hidden.to(x.dtype) @ down_proj.T)
"""


def test_swiglu_mlp_flops_and_fused_bytes(make_problem):
    t, h, i = 64, 256, 512
    spec = definition(
        "swiglu", {"T": None, "H": h, "I": i},
        {"x": [["T", "H"], "bfloat16"], "gate_proj": [["I", "H"], "bfloat16"],
         "up_proj": [["I", "H"], "bfloat16"], "down_proj": [["H", "I"], "bfloat16"]},
        {"y": [["T", "H"], "bfloat16"]}, SWIGLU_REFERENCE)
    result, _ = analyze(make_problem, spec, {"T": t})
    assert result.flops["tensor.bf16"] == 3 * 2 * t * h * i  # three T x H x I products
    assert result.bytes_fused == 2 * (t * h + 3 * h * i + t * h)  # x, three weights, y
    assert result.bytes_unfused > result.bytes_fused  # gate, up, hidden go through memory


RMSNORM_REFERENCE = """import torch

def run(x, norm_weight):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + 1e-5) * norm_weight.float()).to(x.dtype)
"""


def test_rmsnorm_is_memory_bound_at_its_fused_traffic(make_problem):
    t, h = 4096, 4096
    spec = definition("rmsnorm", {"T": None, "H": h},
                      {"x": [["T", "H"], "bfloat16"], "norm_weight": [["H"], "bfloat16"]},
                      {"y": [["T", "H"], "bfloat16"]}, RMSNORM_REFERENCE)
    result, _ = analyze(make_problem, spec, {"T": t})
    fused = 2 * (t * h + h + t * h)  # read x and the weight once, write y once
    assert result.bytes_fused == fused
    assert result.tensor_core_flops == 0
    assert result.bound == "memory"
    assert result.t_sol_ms == pytest.approx(fused / H200.dram_bytes_per_s * 1e3)


def test_conv2d_matches_the_direct_formula(make_problem):
    n, c, k, hw, kernel = 2, 3, 8, 16, 3
    spec = definition("conv", {"N": None, "C": c, "K": k, "HW": hw, "R": kernel},
                      {"x": [["N", "C", "HW", "HW"], "float16"],
                       "w": [["K", "C", "R", "R"], "float16"]},
                      {"y": [["N", "K", "HW", "HW"], "float16"]},
                      "import torch\ndef run(x, w):\n"
                      "    return torch.nn.functional.conv2d(x, w, padding=1)\n")
    result, _ = analyze(make_problem, spec, {"N": n})
    out_elements = n * k * hw * hw
    assert result.flops["tensor.fp16"] == 2 * out_elements * c * kernel * kernel


FP8_REFERENCE = """import torch

def run(a, b, scale_a, scale_b):
    a32 = a.to(torch.float32) * scale_a
    b32 = b.to(torch.float32) * scale_b
    return (a32 @ b32.T).to(torch.bfloat16)
"""


def test_fp8_gemm_written_as_dequantize_then_matmul_is_priced_as_fp8(make_problem):
    m, n, k = 256, 512, 1024
    spec = definition("fp8", {"M": None, "N": n, "K": k},
                      {"a": [["M", "K"], "float8_e4m3fn"], "b": [["N", "K"], "float8_e4m3fn"],
                       "scale_a": [[], "float32"], "scale_b": [[], "float32"]},
                      {"c": [["M", "N"], "bfloat16"]}, FP8_REFERENCE)
    result, _ = analyze(make_problem, spec, {"M": m})
    assert result.flops["tensor.fp8"] == 2 * m * n * k
    assert "tensor.fp32" not in result.flops
    assert result.priced_as["tensor.fp8"] == "tensor.fp8"
    assert result.bytes_fused == m * k + n * k + 4 + 4 + 2 * m * n  # fp8 in, scales, bf16 out


def test_scaled_mm_call_is_priced_as_fp8(make_problem):
    m, n, k = 64, 128, 256
    reference = ("import torch\ndef run(a, b, sa, sb):\n"
                 "    return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, "
                 "out_dtype=torch.bfloat16)\n")
    spec = definition("scaled_mm", {"M": None, "N": n, "K": k},
                      {"a": [["M", "K"], "float8_e4m3fn"], "b": [["N", "K"], "float8_e4m3fn"],
                       "sa": [[], "float32"], "sb": [[], "float32"]},
                      {"c": [["M", "N"], "bfloat16"]}, reference)
    result, _ = analyze(make_problem, spec, {"M": m})
    assert result.flops["tensor.fp8"] == 2 * m * n * k


MOE_REFERENCE = """import torch

def run(x, router, w_up, w_down):
    probs = torch.softmax(x.float() @ router.float().T, dim=-1)
    weights, ids = torch.topk(probs, 2, dim=-1)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(w_up.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        hidden = torch.relu(x[token].float() @ w_up[e].float().T)
        y.index_add_(0, token, (hidden @ w_down[e].float().T) * weights[token, slot, None])
    return y.to(x.dtype)
"""


def moe_spec(experts: int = 8, hidden: int = 64, inter: int = 128) -> dict:
    return definition(
        "moe", {"T": None, "E": experts, "H": hidden, "I": inter},
        {"x": [["T", "H"], "bfloat16"], "router": [["E", "H"], "bfloat16"],
         "w_up": [["E", "I", "H"], "bfloat16"], "w_down": [["E", "H", "I"], "bfloat16"]},
        {"y": [["T", "H"], "bfloat16"]}, MOE_REFERENCE)


@pytest.mark.parametrize("tokens", [1, 3, 2048])
def test_moe_routing_traces_with_data_dependent_shapes(make_problem, tokens):
    e, h, i, top_k = 8, 64, 128, 2
    result, problem = analyze(make_problem, moe_spec(e, h, i), {"T": tokens})
    router = 2 * tokens * h * e
    experts = tokens * top_k * (2 * h * i + 2 * i * h)  # every token visits top_k experts
    assert result.flops["tensor.bf16"] == router + experts
    trace = trace_reference(problem, problem.workloads[0])
    expert_bytes = 2 * h * i  # one expert's up (or down) matrix, bf16
    touched = trace.input_bytes_read["w_up"] // expert_bytes
    assert trace.input_bytes_read["w_down"] == touched * expert_bytes
    if tokens == 1:
        assert touched == top_k  # decode reads only the routed experts
    if tokens == 2048:
        assert touched == e


PAGED_REFERENCE = """import torch

def run(kv_pages, page_table):
    gathered = kv_pages[page_table.long()]
    return gathered.float().sum(dim=1).to(kv_pages.dtype)
"""


def test_paged_gather_reads_only_the_pages_in_the_table(make_problem):
    pages, page_size, d, used = 1000, 16, 64, 7
    reference = PAGED_REFERENCE
    entry = ("def pick(axes, device):\n    return {'page_table': torch.arange("
             "0, 7 * 3, 3, dtype=torch.int32, device=device)}\n")
    spec = definition("paged", {"P": pages, "S": page_size, "D": d, "U": None},
                      {"kv_pages": [["P", "S", "D"], "bfloat16"], "page_table": [["U"], "int32"]},
                      {"o": [["U", "D"], "bfloat16"]}, reference + "\n" + entry,
                      custom_inputs_entrypoint="pick")
    folder = make_problem(spec, [{"axes": {"U": used},
                                  "inputs": {"kv_pages": {"type": "random"},
                                             "page_table": {"type": "custom"}}}])
    problem = load_problem(folder)
    result = analyze_workload(problem, problem.workloads[0], H200)
    page_bytes = page_size * d * 2
    assert result.bytes_fused == used * page_bytes + used * 4 + used * d * 2


FP32_GEMM = "def run(a, b):\n    return a @ b\n"


def test_fp32_policy_is_selectable_and_stated(make_problem):
    spec = definition("sgemm", {"M": None, "K": 4096, "N": 4096},
                      {"a": [["M", "K"], "float32"], "b": [["K", "N"], "float32"]},
                      {"c": [["M", "N"], "float32"]}, FP32_GEMM)
    problem = load_problem(make_problem(spec, [{"axes": {"M": 4096}}]))
    workload = problem.workloads[0]
    times = {p: analyze_workload(problem, workload, H200, p) for p in ("simt", "tf32", "fastest")}
    assert times["simt"].priced_as["tensor.fp32"] == "simt.fp32"
    assert times["tf32"].priced_as["tensor.fp32"] == "tensor.tf32"
    flops = 2 * 4096**3
    assert times["simt"].t_sol_ms == pytest.approx(flops / H200.peak("simt.fp32") * 1e3)
    assert times["tf32"].t_sol_ms == pytest.approx(flops / H200.peak("tensor.tf32") * 1e3)
    assert times["fastest"].t_sol_ms < times["tf32"].t_sol_ms < times["simt"].t_sol_ms
    assert times["tf32"].fp32_policy == "tf32"
    floor = sol_floor_ms(problem, workload, H200)
    assert floor < times["fastest"].t_sol_ms  # peaks at the maximum clock


def test_the_floor_counts_the_reads_and_only_the_writes_the_l2_cannot_hold(make_problem):
    """The L2 is write-back: a kernel can end with its outputs still in it, so the floor (what
    no honest kernel beats) leaves out up to the L2's capacity of written bytes; T_SOL keeps
    every byte."""
    spec = definition("add", {"N": None}, {"x": [["N"], "float32"], "y": [["N"], "float32"]},
                      {"z": [["N"], "float32"]}, "import torch\ndef run(x, y):\n    return x + y\n")
    small, large = 1 << 20, 1 << 26  # outputs of 4 MiB and 256 MiB against the L2's tens
    problem = load_problem(make_problem(spec, [{"axes": {"N": small}}, {"axes": {"N": large}}]))
    bandwidth = H200.dram_bytes_per_s
    for workload, n in zip(problem.workloads, (small, large)):
        analysis = analyze_workload(problem, workload, H200)
        assert analysis.t_sol_ms == pytest.approx(12 * n / bandwidth * 1e3)  # 2 reads, 1 write
        unwritten = max(0, 4 * n - H200.l2_bytes)
        floor = sol_floor_ms(problem, workload, H200)
        assert floor == pytest.approx((8 * n + unwritten) / bandwidth * 1e3)
        assert floor < analysis.t_sol_ms


def test_an_op_without_a_cost_rule_is_reported_by_name(make_problem):
    spec = definition("fft", {"N": None}, {"x": [["N"], "float32"]},
                      {"y": [["N"], "float32"]},
                      "import torch\ndef run(x):\n"
                      "    return torch.fft.rfft(x).abs()[:1].repeat(x.shape[0])\n")
    result, _ = analyze(make_problem, spec, {"N": 64})
    assert any("fft" in name for name in result.unknown_ops)
    assert any("no cost rule" in note for note in result.notes)


def test_b200_clock_locked_profile_changes_the_compute_bound(make_problem):
    spec = definition("gemm", {"M": None, "K": 8192, "N": 8192},
                      {"a": [["M", "K"], "bfloat16"], "b": [["K", "N"], "bfloat16"]},
                      {"c": [["M", "N"], "bfloat16"]}, FP32_GEMM)
    problem = load_problem(make_problem(spec, [{"axes": {"M": 8192}}]))
    locked = analyze_workload(problem, problem.workloads[0], load_profile("B200@1500MHz"))
    assert locked.hardware.startswith("B200")
    assert locked.t_sol_ms == pytest.approx(2 * 8192**3 / 1.811e15 * 1e3, rel=0.01)


@pytest.mark.slow
def test_cli_analyze_json_lines(make_problem):
    folder = make_problem(moe_spec(), [{"axes": {"T": 1}}, {"axes": {"T": 64}}])
    done = subprocess.run([sys.executable, "-m", "solforge", "analyze", str(folder), "--json",
                           "--hardware", "A100"], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["workload"] for line in lines] == ["w0", "w1"]
    for line in lines:
        for key in ("flops", "tensor_core_flops", "bytes_fused", "bytes_unfused", "t_sol_ms",
                    "bound", "hardware"):
            assert key in line
        assert line["hardware"].startswith("A100")
        assert line["bound"] in {"compute", "memory"}


# ---- coverage: every op family of the suite is costed, none falls through as unknown ----------

CONV_CASES = [
    ("conv1d", "torch.nn.functional.conv1d(x, w, padding=2)", [2, 8, 50], [16, 8, 5]),
    ("conv3d", "torch.nn.functional.conv3d(x, w, stride=2)", [1, 4, 8, 8, 8], [6, 4, 3, 3, 3]),
    ("depthwise", "torch.nn.functional.conv2d(x, w, padding=1, groups=8)", [2, 8, 12, 12],
     [8, 1, 3, 3]),
    ("transposed", "torch.nn.functional.conv_transpose2d(x, w, stride=2)", [2, 8, 6, 6],
     [8, 4, 3, 3]),
]


@pytest.mark.parametrize(("name", "call", "x_shape", "w_shape"), CONV_CASES,
                         ids=[c[0] for c in CONV_CASES])
def test_convolution_variants_match_torch_flop_counter(make_problem, name, call, x_shape,
                                                       w_shape):
    axes = {f"x{i}": s for i, s in enumerate(x_shape)} | {f"w{i}": s for i, s in
                                                          enumerate(w_shape)}
    reference = f"import torch\ndef run(x, w):\n    return {call}\n"
    meta_x = torch.empty(x_shape, device="meta")
    meta_w = torch.empty(w_shape, device="meta")
    namespace: dict = {}
    exec(reference, namespace)
    out_shape = list(namespace["run"](meta_x, meta_w).shape)
    axes |= {f"o{i}": s for i, s in enumerate(out_shape)}
    spec = definition(name, axes, {"x": [[f"x{i}" for i in range(len(x_shape))], "float32"],
                                   "w": [[f"w{i}" for i in range(len(w_shape))], "float32"]},
                      {"y": [[f"o{i}" for i in range(len(out_shape))], "float32"]}, reference)
    spec["axes"]["x0"] = {"type": "var"}
    result, _ = analyze(make_problem, spec, {"x0": x_shape[0]})
    with FlopCounterMode(display=False) as counter:
        namespace["run"](meta_x, meta_w)
    assert sum(result.flops.values()) == counter.get_total_flops()
    # one input and one output channel per group fits no tensor-core tile: CUDA cores
    assert result.tensor_core_flops == (0 if name == "depthwise" else counter.get_total_flops())


@pytest.mark.parametrize(("groups", "on_tensor_cores"), [(64, False), (8, True), (1, True)])
def test_depthwise_convolution_is_priced_on_cuda_cores(make_problem, groups, on_tensor_cores):
    """A compute-heavy depthwise conv (64 channels, 7x7 taps, bf16) gets the CUDA-core time, ~15x
    the tensor-core one on an H200; grouped convs with 8 channels per group stay GEMMs."""
    reference = ("import torch\ndef run(x, w):\n"
                 f"    return torch.nn.functional.conv2d(x, w, padding=3, groups={groups})\n")
    spec = definition("dw", {"N": None, "C": 64, "CG": 64 // groups, "HW": 256, "R": 7},
                      {"x": [["N", "C", "HW", "HW"], "bfloat16"],
                       "w": [["C", "CG", "R", "R"], "bfloat16"]},
                      {"y": [["N", "C", "HW", "HW"], "bfloat16"]}, reference)
    result, _ = analyze(make_problem, spec, {"N": 32})
    macs = 32 * 64 * 256 * 256 * (64 // groups) * 49
    assert sum(result.flops.values()) == 2 * macs
    if on_tensor_cores:
        assert result.flops.get("tensor.bf16") == 2 * macs
    else:
        assert result.tensor_core_flops == 0 and result.flops["simt.fp32"] == 2 * macs
        assert result.bound == "compute" and result.binding_unit == "simt.fp32"
        simt_ms = 2 * macs / H200.peak("simt.fp32") * 1e3
        assert result.t_sol_ms == pytest.approx(simt_ms)


OP_FAMILIES = {
    "elementwise_and_activations": "y = torch.nn.functional.gelu(x) + torch.sigmoid(x) * "
                                   "torch.nn.functional.silu(x).clamp(-1, 1) - x.exp().log1p()",
    "softmaxes": "y = torch.softmax(x, -1) + torch.log_softmax(x, -1)",
    "norms": "y = torch.nn.functional.layer_norm(x, (16,)) + "
             "torch.nn.functional.rms_norm(x, (16,)) + "
             "torch.nn.functional.group_norm(x.view(4, 4, 4, 4), 2).view(16, 16)",
    "reductions": "y = x - x.sum(-1, keepdim=True) * x.mean(0) + x.amax(-1, keepdim=True) + "
                  "x.var(-1, keepdim=True) + x.norm(dim=-1, keepdim=True) + "
                  "x.logsumexp(-1, keepdim=True) + x.argmax(-1, keepdim=True)",
    "scans": "y = torch.cumsum(x, -1) + torch.cumprod(x.sigmoid(), 0)",
    "topk_and_sort": "v, i = torch.topk(x, 4, dim=-1)\n    s, j = torch.sort(x, dim=-1)\n"
                     "    y = s.clone()\n    y[:, :4] = v + i + j[:, :4]",
    "gather_scatter": "ids = torch.argsort(x[:, 0])\n"
                      "    e = torch.nn.functional.embedding(ids, x)\n"
                      "    g = torch.gather(x, 1, ids[:, None].expand(16, 16) % 16)\n"
                      "    z = torch.zeros_like(x).index_add_(0, ids, e)\n"
                      "    z = z.scatter_add(0, ids[:, None].expand(16, 16), g)\n"
                      "    y = z + x.index_select(0, ids) + x[ids]",
    "copies_and_casts": "y = x.to(torch.bfloat16).float().t().contiguous().t() + "
                        "torch.cat([x[:8], x[8:]]) + torch.stack([x, x]).sum(0) + x.flip(0) + "
                        "x.clone().as_strided_((16, 16), (1, 16))",
    "masks_and_where": "m = x > 0\n    y = torch.where(m, x, -x).masked_fill(~m, 1.0) + "
                       "torch.tril(x) + torch.nn.functional.pad(x, (1, 1))[:, 1:-1]",
    "data_dependent": "picked = x[x > 0]\n    n = int((x > 0).sum())\n"
                      "    y = x * (picked.sum() / max(n, 1)) + torch.nonzero(x > 1).shape[0]",
    "matmul_family": "w = x.to(torch.float16)\n"
                     "    y = (torch.matmul(w, w) + torch.addmm(w, w, w)).float() + "
                     "torch.einsum('ij,jk->ik', x, x)",
    "int8_matmul": "q = (x * 10).to(torch.int8).repeat(2, 2)\n"
                   "    y = torch._int_mm(q, q)[:16, :16].float()",
    "cross_entropy": "t = torch.argmax(x, -1)\n"
                     "    y = x + torch.nn.functional.cross_entropy(x, t)",
    "pooling": "i = x.view(1, 4, 8, 8)\n"
               "    a = torch.nn.functional.max_pool2d(i, 2, return_indices=True)[0]\n"
               "    b = torch.nn.functional.avg_pool2d(i, 2) + "
               "torch.nn.functional.max_pool2d(i, 2)\n"
               "    c = torch.nn.functional.max_pool1d(x.view(1, 16, 16), 2)\n"
               "    d = torch.nn.functional.avg_pool3d(i.view(1, 1, 4, 8, 8), 2)\n"
               "    e = torch.nn.functional.adaptive_avg_pool2d(i, 1)\n"
               "    y = x + (a + b).sum() + c.sum() + d.sum() + e.sum()",
    "activations_and_losses": "t = x.flip(0)\n"
                              "    y = torch.nn.functional.hardswish(x) + "
                              "torch.nn.functional.hardsigmoid(x) + "
                              "torch.nn.functional.hardtanh(x) + "
                              "torch.nn.functional.leaky_relu(x) + "
                              "torch.nn.functional.smooth_l1_loss(x, t) + "
                              "torch.nn.functional.huber_loss(x, t) + "
                              "torch.nn.functional.mse_loss(x, t) + "
                              "torch.nn.functional.kl_div(x, t.softmax(-1), "
                              "reduction='batchmean') + "
                              "torch.nn.functional.elu(x) + torch.nn.functional.selu(x)",
    "recurrent": "lstm = torch.nn.LSTM(16, 16, batch_first=True)\n"
                 "    gru = torch.nn.GRU(16, 16, num_layers=2, bidirectional=True)\n"
                 "    out, _ = lstm(x.view(2, 8, 16))\n"
                 "    back, _ = gru(x.view(8, 2, 16))\n"
                 "    y = x + out.sum() + back.sum()",
    "grouped_experts": "a = x.to(torch.bfloat16)\n"
                       "    b = a.view(1, 16, 16).expand(2, 16, 16).contiguous()\n"
                       "    offs = torch.tensor([8, 16], dtype=torch.int32)\n"
                       "    y = torch._grouped_mm(a, b, offs=offs).float()",
}


@pytest.mark.parametrize("family", list(OP_FAMILIES))
def test_every_op_family_is_costed(make_problem, family):
    body = OP_FAMILIES[family]
    reference = f"import torch\n\ndef run(x):\n    {body}\n    return y\n"
    spec = definition(family, {"N": None, "H": 16}, {"x": [["N", "H"], "float32"]},
                      {"y": [["N", "H"], "float32"]}, reference)
    result, _ = analyze(make_problem, spec, {"N": 16})
    assert result.unknown_ops == ()
    assert result.bytes_unfused > 0
    assert sum(result.flops.values()) > 0


WINDOW_REFERENCE = """import torch
import torch.nn.functional as F

def run(q, k, v):
    positions = torch.arange(q.shape[-2], device=q.device)
    query, key = positions[:, None], positions[None, :]
    keep = (key <= query) & (key > query - 8)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
"""


def test_sliding_window_mask_counts_only_the_kept_pairs(make_problem):
    s, d, window = 64, 32, 8
    spec = definition("window", {"S": None, "H": 2, "D": d},
                      {"q": [["H", "S", "D"], "float16"], "k": [["H", "S", "D"], "float16"],
                       "v": [["H", "S", "D"], "float16"]},
                      {"o": [["H", "S", "D"], "float16"]}, WINDOW_REFERENCE)
    result, _ = analyze(make_problem, spec, {"S": s})
    kept = sum(min(i + 1, window) for i in range(s))  # query i sees keys i-7 .. i
    assert result.flops["tensor.fp16"] == pytest.approx(2 * 2 * kept * (d + d))


LSTM_REFERENCE = """import torch

def run(x, w_ih, w_hh, b_ih, b_hh):
    out, _, _ = torch.lstm(x, (x.new_zeros(1, 4, 32), x.new_zeros(1, 4, 32)),
                           [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, False, False, True)
    return out
"""


def test_lstm_layer_costs_its_gate_products(make_problem):
    """T=10 steps, B=4, I=16, H=32: 2*T*B*4H*(I+H) tensor FLOPs (the input GEMM plus T
    recurrent ones), not an uncosted op."""
    spec = definition("lstm", {"B": None, "T": 10, "I": 16, "G": 128, "H": 32},
                      {"x": [["B", "T", "I"], "float32"], "w_ih": [["G", "I"], "float32"],
                       "w_hh": [["G", "H"], "float32"], "b_ih": [["G"], "float32"],
                       "b_hh": [["G"], "float32"]},
                      {"y": [["B", "T", "H"], "float32"]}, LSTM_REFERENCE)
    result, _ = analyze(make_problem, spec, {"B": 4})
    assert result.unknown_ops == ()
    assert result.flops["tensor.fp32"] == 2 * 10 * 4 * 128 * (16 + 32)
