"""Variants of the shipped Llama-3.1-8B SwiGLU MLP (l2/swiglu_mlp_llama3_1_8b), which read
0.85x torch.compile's time on the H200 (2026-12-03): two Triton GEMMs, gate and up fused with
SwiGLU in the first one's epilogue. torch.compile runs cuBLAS for the three GEMMs and one
fused SwiGLU kernel.

Per workload (H200, 2026-12-04 suite: shipped against torch.compile, T_SOL) the shipped kernels
lose from 512 tokens on (1.19-1.24x compile's time: its Triton GEMMs against cuBLAS) and at one
token (150 us against 123; T_SOL 73 us, the 352 MB of weights read once); 16 tokens is a tie
(128 us). So the variants split by token count:

- `fused_gate_up_cublas_down`: the shipped fused gate/up kernel (it saves writing and reading
  gate and up, 4 * 14336 bytes a token), the down GEMM on cuBLAS.
- `cublas_gemms_triton_swiglu`: torch.compile's own decomposition, written out: cuBLAS for the
  three GEMMs, one Triton kernel for silu(gate) * up. At prefill sizes the GEMMs are 97% of
  the time; this is the floor a Triton-free prefill path can reach (a tie, not a win).
- `gemv_gate_up_cublas_down`: for one or two tokens, gate, up and SwiGLU in one CUDA-core GEMV
  (a program owns 8 rows of both weights and streams them along K in 16-byte vectors, 16 KB a
  step: decode reads the weights once and is bound by HBM, 235 MB for gate and up, 49 us at
  4.8 TB/s), the down GEMM on cuBLAS (117 MB, 30.4 us measured for 1 x 4096 x 14336 on the
  H200, 3.86 TB/s). Two kernels against torch.compile's four.
- `composite`: the GEMV path up to two tokens, the fused gate/up kernel up to 64, cuBLAS and
  the Triton SwiGLU above; the down GEMM on cuBLAS throughout. The candidate to ship if the
  GPU says each path wins where it is used.

Rounding follows the reference: gate and up rounded to bfloat16 (what matmul returns), silu in
float32 rounded to bfloat16, the product rounded again."""

import importlib.util
import json
import tempfile
import types
from pathlib import Path

import torch
import triton
import triton.language as tl

SOLUTION = (Path(__file__).resolve().parents[2] / "src" / "solforge" / "solutions" / "l2"
            / "swiglu_mlp_llama3_1_8b" / "triton_swiglu_mlp.json")


def _shipped_kernels() -> types.ModuleType:
    """The shipped kernel file, written out and imported (Triton's JIT reads its source)."""
    source = json.loads(SOLUTION.read_text())["sources"][0]
    path = Path(tempfile.mkdtemp(prefix="swiglu_mlp_")) / source["path"]
    path.write_text(source["content"])
    spec = importlib.util.spec_from_file_location("shipped_swiglu_mlp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_KERNELS = _shipped_kernels()
_bf16 = _KERNELS._bf16  # round to nearest even, also under the interpreter
INTERPRET = _KERNELS.INTERPRET
GEMV_MAX_TOKENS = 2
FUSED_MAX_TOKENS = 64
GEMV_ROWS = 8  # weight rows a program owns
GEMV_STEP = 512  # K elements a step at one token: 2 weights x 8 rows x 512 x 2 bytes = 16 KB
SWIGLU_BLOCK = 2048


@triton.jit
def _gate_up_gemv(x_ptr, gate_w_ptr, up_w_ptr, act_ptr, M, N, K, x_stride, gate_w_stride,
                  up_w_stride, act_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, ROUND_IN_FLOAT32: tl.constexpr):
    """act[:, n] for BLOCK_N rows n of both weights; K a whole number of BLOCK_K steps. Rows
    of x past M and weight rows past N are clamped to row 0 (loaded, never stored), so every
    load is an unmasked 16-byte vector."""
    rows = tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, 0)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_cols = tl.where(cols < N, cols, 0).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + safe_rows[:, None] * x_stride + (k + ks)[None, :]).to(tl.float32)
        wg = tl.load(gate_w_ptr + safe_cols[:, None] * gate_w_stride + (k + ks)[None, :])
        wu = tl.load(up_w_ptr + safe_cols[:, None] * up_w_stride + (k + ks)[None, :])
        gate += tl.sum(x[:, None, :] * wg.to(tl.float32)[None, :, :], axis=2)
        up += tl.sum(x[:, None, :] * wu.to(tl.float32)[None, :, :], axis=2)
    gate = _bf16(gate, ROUND_IN_FLOAT32).to(tl.float32)
    silu = _bf16(gate / (1.0 + tl.exp(-gate)), ROUND_IN_FLOAT32).to(tl.float32)
    activated = _bf16(silu * _bf16(up, ROUND_IN_FLOAT32).to(tl.float32), ROUND_IN_FLOAT32)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    tl.store(act_ptr + rows[:, None] * act_stride + cols[None, :], activated, mask=mask)


@triton.jit
def _swiglu(gate_ptr, up_ptr, act_ptr, n, BLOCK: tl.constexpr, ROUND_IN_FLOAT32: tl.constexpr):
    """act = bf16(bf16(silu(gate)) * up) over n contiguous elements."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    silu = _bf16(gate / (1.0 + tl.exp(-gate)), ROUND_IN_FLOAT32).to(tl.float32)
    tl.store(act_ptr + offsets, _bf16(silu * up, ROUND_IN_FLOAT32), mask=mask)


def _gemv_activation(x, gate_w, up_w):
    m, hidden = x.shape
    intermediate = gate_w.shape[0]
    block_m = triton.next_power_of_2(m)
    block_k = GEMV_STEP // block_m
    if m > GEMV_MAX_TOKENS or hidden % block_k:
        raise ValueError(f"the GEMV path takes 1 to {GEMV_MAX_TOKENS} tokens and a hidden size "
                         f"that is a multiple of {block_k}")
    act = x.new_empty((m, intermediate))
    _gate_up_gemv[(triton.cdiv(intermediate, GEMV_ROWS),)](
        x, gate_w, up_w, act, m, intermediate, hidden, x.stride(0), gate_w.stride(0),
        up_w.stride(0), act.stride(0), BLOCK_M=block_m, BLOCK_N=GEMV_ROWS, BLOCK_K=block_k,
        ROUND_IN_FLOAT32=INTERPRET, num_warps=4, num_stages=2)
    return act


def _fused_activation(x, gate_w, up_w):
    m, hidden = x.shape
    intermediate = gate_w.shape[0]
    act = x.new_empty((m, intermediate))
    _KERNELS._gate_up_swiglu[lambda meta: (triton.cdiv(m, meta["BLOCK_M"])
                                           * triton.cdiv(intermediate, meta["BLOCK_N"]),)](
        x, gate_w, up_w, act, m, intermediate, hidden, x.stride(0), gate_w.stride(0),
        up_w.stride(0), act.stride(0), DOT_IN_FLOAT32=INTERPRET)
    return act


def _cublas_activation(x, gate_w, up_w):
    gate = torch.matmul(x, gate_w.T)
    up = torch.matmul(x, up_w.T)
    act = torch.empty_like(gate)
    n = gate.numel()
    _swiglu[(triton.cdiv(n, SWIGLU_BLOCK),)](gate, up, act, n, BLOCK=SWIGLU_BLOCK,
                                             ROUND_IN_FLOAT32=INTERPRET, num_warps=8)
    return act


def _down(act, down_w, output):
    torch.matmul(act, down_w.T, out=output)


def fused_gate_up_cublas_down(hidden_states, gate_proj_weight, up_proj_weight,
                              down_proj_weight, output):
    _down(_fused_activation(hidden_states, gate_proj_weight, up_proj_weight), down_proj_weight,
          output)


def cublas_gemms_triton_swiglu(hidden_states, gate_proj_weight, up_proj_weight,
                               down_proj_weight, output):
    _down(_cublas_activation(hidden_states, gate_proj_weight, up_proj_weight), down_proj_weight,
          output)


def gemv_gate_up_cublas_down(hidden_states, gate_proj_weight, up_proj_weight,
                             down_proj_weight, output):
    """One or two tokens only (more: ValueError, recorded as failed)."""
    _down(_gemv_activation(hidden_states, gate_proj_weight, up_proj_weight), down_proj_weight,
          output)


def composite(hidden_states, gate_proj_weight, up_proj_weight, down_proj_weight, output):
    tokens = hidden_states.shape[0]
    if tokens <= GEMV_MAX_TOKENS:
        activation = _gemv_activation
    elif tokens <= FUSED_MAX_TOKENS:
        activation = _fused_activation
    else:
        activation = _cublas_activation
    _down(activation(hidden_states, gate_proj_weight, up_proj_weight), down_proj_weight, output)


VARIANTS = {
    "fused_gate_up_cublas_down": fused_gate_up_cublas_down,
    "cublas_gemms_triton_swiglu": cublas_gemms_triton_swiglu,
    "gemv_gate_up_cublas_down": gemv_gate_up_cublas_down,
    "composite": composite,
}
