"""Extended-einsum costs of ATen ops: FLOPs per compute unit, bytes an unfused kernel moves.

Conventions (the README's "analysis conventions" section says the same):
- a multiply-add is 2 FLOPs; a matrix product C[M,N] = A[M,K] B[K,N] is 2*M*N*K FLOPs on the tensor
  core of its operands' origin precision (see tracer.py: fp8 data upcast to float32 is an fp8
  product), "tensor.fp32" for float32 operands, priced by the fp32 policy later;
- elementwise ops cost a few FLOPs per output element on the CUDA cores (weights below; they
  almost never bind), reductions one per input element;
- bytes: every tensor an op reads, at its own size (a broadcast operand is read once), plus every
  tensor it writes; a gather reads the gathered rows, not the whole table; views move nothing.
An op with no rule is reported by name (`unknown`), never counted as free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch

from solforge.data.dtypes import packing
from solforge.hardware.units import (
    SIMT_FP32,
    SIMT_FP64,
    TENSOR_BF16,
    TENSOR_FP4,
    TENSOR_FP8,
    TENSOR_FP16,
    TENSOR_FP64,
    TENSOR_INT8,
)
from solforge.solar.records import OpCost, OpRecord, Product, TensorInfo

CostRule = Callable[[OpRecord], OpCost]
_RULES: dict[str, CostRule] = {}

TENSOR_FP32 = "tensor.fp32"  # float32 operands: priced by the fp32 policy (tf32, simt, fastest)


def rule(*packets: str) -> Callable[[CostRule], CostRule]:
    def register(fn: CostRule) -> CostRule:
        for packet in packets:
            _RULES[packet] = fn
        return fn

    return register


def cost_of(op: OpRecord) -> OpCost | None:
    """The cost of one recorded op; None when no rule knows it."""
    if op.is_view or op.packet in FREE:
        return OpCost()
    found = _RULES.get(op.packet)
    if found is not None:
        return found(op)
    if "pointwise" in op.tags:
        return _pointwise(op)
    if "reduction" in op.tags:
        return _reduction(op)
    return None


# ---- helpers ---------------------------------------------------------------------------------

def _bytes(tensors) -> float:
    return float(sum(t.nbytes for t in tensors if isinstance(t, TensorInfo)))


def _inputs(op: OpRecord) -> list[TensorInfo]:
    return op.tensor_args()


def _simt_unit(tensor: TensorInfo) -> str:
    return SIMT_FP64 if tensor.dtype == torch.float64 else SIMT_FP32


def _move(op: OpRecord, flops: dict[str, float] | None = None) -> OpCost:
    """Read every tensor argument, write every output."""
    return OpCost(flops or {}, _bytes(_inputs(op)), _bytes(op.outputs))


def _bits(dtype: torch.dtype) -> int:
    return dtype.itemsize * 8 // packing(dtype)


def product_unit(a: TensorInfo, b: TensorInfo) -> str:
    """Tensor-core unit of a product: the wider of the two operands' origin precisions.

    int8 x int8 runs on the int8 unit; a mixed int8-weight x bf16 product runs at the bf16 rate;
    fp8 x fp8 at the fp8 rate; 4-bit x 4-bit at the fp4 rate.
    """
    wider = max((a.origin, b.origin), key=_bits)
    both_int = not a.origin.is_floating_point and not b.origin.is_floating_point
    bits = _bits(wider)
    if bits == 4:
        return TENSOR_FP4
    if bits == 8:
        return TENSOR_INT8 if both_int else TENSOR_FP8
    if wider == torch.float16:
        return TENSOR_FP16
    if bits == 16:
        return TENSOR_BF16
    if wider == torch.float64:
        return TENSOR_FP64
    if wider.is_floating_point or wider.is_complex:
        return TENSOR_FP32
    return SIMT_FP32  # wide integer products have no tensor-core path


def _product(m: int, n: int, k: int, batch: int, a: TensorInfo, b: TensorInfo) -> OpCost:
    """C[batch, M, N] = A[batch, M, K] B[batch, K, N]: 2*batch*M*N*K FLOPs."""
    element = max(a.dtype.itemsize, b.dtype.itemsize)
    return OpCost({product_unit(a, b): 2.0 * batch * m * n * k},
                  products=(Product(m, n, k, element, batch),))


def _merge(*costs: OpCost) -> OpCost:
    flops: dict[str, float] = {}
    for cost in costs:
        for unit, value in cost.flops.items():
            flops[unit] = flops.get(unit, 0.0) + value
    return OpCost(flops, sum(c.bytes_read for c in costs), sum(c.bytes_written for c in costs),
                  tuple(p for c in costs for p in c.products))


# ---- matrix products ---------------------------------------------------------------------------

@rule("mm", "_int_mm")
def _mm(op: OpRecord) -> OpCost:
    a, b = op.arg("self"), op.arg("mat2")
    (m, k), n = a.shape, b.shape[1]
    return _merge(_product(m, n, k, 1, a, b), _move(op))


@rule("addmm")
def _addmm(op: OpRecord) -> OpCost:
    a, b = op.arg("mat1"), op.arg("mat2")
    (m, k), n = a.shape, b.shape[1]
    bias_add = OpCost({SIMT_FP32: float(m * n)})
    return _merge(_product(m, n, k, 1, a, b), bias_add, _move(op))


@rule("bmm")
def _bmm(op: OpRecord) -> OpCost:
    a, b = op.arg("self"), op.arg("mat2")
    batch, m, k = a.shape
    return _merge(_product(m, b.shape[2], k, batch, a, b), _move(op))


@rule("baddbmm")
def _baddbmm(op: OpRecord) -> OpCost:
    a, b = op.arg("batch1"), op.arg("batch2")
    batch, m, k = a.shape
    n = b.shape[2]
    return _merge(_product(m, n, k, batch, a, b), OpCost({SIMT_FP32: float(batch * m * n)}),
                  _move(op))


@rule("_scaled_mm", "_scaled_mm_v2")
def _scaled_mm(op: OpRecord) -> OpCost:
    """FP8 / FP4 product with scales: 2*M*N*K on the low-precision unit, M*N scaling FLOPs.

    Packed fp4 operands hold two elements per byte, so the logical K is twice the stored one.
    """
    a, b = op.arg("self"), op.arg("mat2")
    m, k = a.shape[0], a.shape[1] * packing(a.dtype)
    n = b.shape[1]
    scale = OpCost({SIMT_FP32: float(m * n)})
    return _merge(_product(m, n, k, 1, a, b), scale, _move(op))


@rule("_grouped_mm", "_scaled_grouped_mm")
def _grouped_mm(op: OpRecord) -> OpCost:
    """Grouped GEMM (MoE experts): every output element is one K-long dot product.

    2-D x 3-D (tokens sorted by expert): out[T, N], K = A.shape[1] -> 2*T*N*K. 3-D x 3-D: a batched
    product. 2-D x 2-D (groups split K): out[G, M, N] with the K extents summing to A.shape[1].
    Only the expert weights of non-empty groups are read, when the group offsets are known.
    """
    a, b = op.arg("self"), op.arg("mat2")
    out = op.outputs[0]
    if a.ndim == 2 and b.ndim == 2:
        k_total = a.shape[1] * packing(a.dtype)
        flops = 2.0 * out.shape[-2] * out.shape[-1] * k_total
    else:
        k = a.shape[-1] * packing(a.dtype)
        flops = 2.0 * out.numel * k
    weights = _grouped_weight_bytes(b, op.arg("offs"))
    read = _bytes([t for t in _inputs(op) if t is not b]) + weights
    return OpCost({product_unit(a, b): flops, SIMT_FP32: float(out.numel)}, read,
                  _bytes(op.outputs))


def _grouped_weight_bytes(weights: TensorInfo, offsets: TensorInfo | None) -> float:
    if weights.ndim != 3 or offsets is None or offsets.values is None:
        return float(weights.nbytes)
    ends = offsets.values.to(torch.int64)
    sizes = torch.diff(ends, prepend=ends.new_zeros(1))
    used = int((sizes > 0).sum())
    return float(weights.nbytes) * used / weights.shape[0]


@rule("convolution", "_convolution", "convolution_overrideable", "cudnn_convolution",
      "mkldnn_convolution")
def _convolution(op: OpRecord) -> OpCost:
    """Direct convolution as an implicit GEMM.

    Forward: each output element is a dot product over (C_in / groups) * prod(kernel) inputs:
    2 * numel(out) * C_in/groups * prod(kernel). Transposed: the same count from the input side,
    2 * numel(in) * C_out/groups * prod(kernel). (The usual formula; e.g. fvcore, torch's
    flop_counter.)
    """
    x, w = op.arg("input"), op.arg("weight")
    out = op.outputs[0]
    kernel = math.prod(w.shape[2:])
    groups = op.arg("groups", 1)
    if op.arg("transposed", False):  # weight [C_in, C_out/groups, k...]: inputs scatter
        macs = x.numel * w.shape[1] * kernel
        gemm_shape = (x.numel // x.shape[1], w.shape[1] * kernel, w.shape[0] // groups)
    else:  # weight [C_out, C_in/groups, k...]: outputs gather
        macs = out.numel * w.shape[1] * kernel
        gemm_shape = (out.numel // out.shape[1], w.shape[0] // groups, w.shape[1] * kernel)
    bias = OpCost({SIMT_FP32: float(out.numel)}) if op.arg("bias") is not None else OpCost()
    if on_cuda_cores(x, w, groups, bool(op.arg("transposed", False))):
        return _merge(OpCost({_simt_unit(out): 2.0 * macs}), bias, _move(op))
    element = max(x.dtype.itemsize, w.dtype.itemsize)
    gemm = OpCost({product_unit(x, w): 2.0 * macs},
                  products=(Product(*gemm_shape, element, groups),))
    return _merge(gemm, bias, _move(op))


def on_cuda_cores(x: TensorInfo, w: TensorInfo, groups: int, transposed: bool) -> bool:
    """A grouped convolution with one input or one output channel per group (depthwise,
    causal-conv1d) is, per group, a matrix-vector product over a few taps: it fits no
    tensor-core instruction (whose smallest tile needs 8 columns), and real kernels (cuDNN's
    depthwise paths, causal-conv1d) run it on the CUDA cores. So it is priced there."""
    if groups <= 1:
        return False
    in_per_group = w.shape[0] // groups if transposed else w.shape[1]
    out_per_group = w.shape[1] if transposed else w.shape[0] // groups
    return min(in_per_group, out_per_group) == 1


@rule("mkldnn_rnn_layer")
def _rnn_layer(op: OpRecord) -> OpCost:
    """One direction of one recurrent layer (LSTM: 4 gates, GRU: 3, plain RNN: 1) over T steps.

    Per step and batch row, the gates are x_t W_ih^T + h_{t-1} W_hh^T with W_ih [G*H, I] and
    W_hh [G*H, H]: 2*G*H*(I + H) FLOPs on the tensor cores (the input part as one [T*B, I] x
    [I, G*H] GEMM, the recurrent part as T small [B, H] x [H, G*H] ones), then about 10 FLOPs
    per hidden unit for the gate nonlinearities and the state update.
    """
    x, w_ih, w_hh = op.arg("input"), op.arg("weight0"), op.arg("weight1")
    steps, batch = (x.shape[1], x.shape[0]) if op.arg("batch_first") else x.shape[:2]
    gates, inputs, hidden = w_ih.shape[0], w_ih.shape[1], w_hh.shape[1]
    input_part = _product(steps * batch, gates, inputs, 1, x, w_ih)
    recurrent = _product(batch, gates, hidden, steps, x, w_hh)
    pointwise = OpCost({_simt_unit(x): 10.0 * steps * batch * hidden})
    return _merge(input_part, recurrent, pointwise, _move(op))


@rule("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell")
def _rnn_cell_pointwise(op: OpRecord) -> OpCost:
    """The gate nonlinearities and state update of one step (the GEMMs are separate ops)."""
    gates = op.arg("input_gates")
    return _move(op, {_simt_unit(gates): 3.0 * gates.numel})


# ---- attention ---------------------------------------------------------------------------------

def causal_pairs(q_len: int, kv_len: int) -> int:
    """Query-key pairs a causal mask keeps, with PyTorch's top-left alignment.

    Query i sees keys 0..i, so pairs = sum_i min(i + 1, kv_len). For q_len == kv_len = S this is
    S (S + 1) / 2.
    """
    full_rows = min(q_len, kv_len)
    pairs = full_rows * (full_rows + 1) // 2
    return pairs + max(0, q_len - kv_len) * kv_len


@rule("sdpa")
def _sdpa(op: OpRecord) -> OpCost:
    """softmax(Q K^T * scale [+ mask]) V over B x H_q heads; GQA shares K/V across H_q / H_kv.

    Pairs kept = Sq*Skv, or the causal count, times the fraction a given mask keeps. FLOPs:
    2*pairs*D_qk for Q K^T and 2*pairs*D_v for P V (tensor core, operand precision) plus ~5 per
    pair for the softmax (scale, max, subtract, exp, sum) on the CUDA cores. Bytes: Q, K, V (at
    their H_kv heads), the mask and the output: the FlashAttention traffic.
    """
    q, k, v = op.arg("query"), op.arg("key"), op.arg("value")
    q_len, kv_len = q.shape[-2], k.shape[-2]
    heads = math.prod(q.shape[:-2])
    per_head = causal_pairs(q_len, kv_len) if op.arg("is_causal") else q_len * kv_len
    pairs = heads * per_head * op.arg("mask_kept_fraction", 1.0)
    d_qk, d_v = q.shape[-1], v.shape[-1]
    element = max(q.dtype.itemsize, k.dtype.itemsize)
    kept = pairs / (q_len * kv_len) if q_len * kv_len else 0.0  # heads x kept fraction
    tensor = OpCost({product_unit(q, k): 2.0 * pairs * (d_qk + d_v)},
                    products=(Product(q_len, kv_len, d_qk, element, kept),
                              Product(q_len, d_v, kv_len, element, kept)))
    softmax = OpCost({SIMT_FP32: 5.0 * pairs})
    return _merge(tensor, softmax, _move(op))


@rule("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
      "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
      "_flash_attention_forward", "_efficient_attention_forward")
def _aten_attention(op: OpRecord) -> OpCost:
    """The fused attention ATen ops, when a reference calls them directly: same count as sdpa."""
    query = op.arg("query")
    key = op.arg("key")
    value = op.arg("value")
    flash_layout = op.packet in {"_flash_attention_forward", "_efficient_attention_forward"}
    if flash_layout:  # [B, S, H, D] -> [B, H, S, D]
        query, key, value = (_swap_heads(t) for t in (query, key, value))
    named = {"query": query, "key": key, "value": value,
             "is_causal": bool(op.arg("is_causal", False) or op.arg("causal", False)),
             "mask_kept_fraction": 1.0}
    return _sdpa(OpRecord("solforge.sdpa", named, op.outputs[:1]))


def _swap_heads(t: TensorInfo) -> TensorInfo:
    shape = (*t.shape[:-3], t.shape[-2], t.shape[-3], t.shape[-1])
    return TensorInfo(t.ident, shape, t.stride, t.dtype, t.origin, t.source, t.values)


# ---- elementwise and reductions ----------------------------------------------------------------

# FLOPs per output element for pointwise ops that are more than one arithmetic step.
POINTWISE_FLOPS = {
    "silu": 4, "gelu": 8, "sigmoid": 4, "tanh": 4, "softplus": 3, "mish": 8, "elu": 3,
    "hardswish": 4, "logit": 3, "erf": 4, "erfinv": 8, "lerp": 2, "addcmul": 2, "addcdiv": 2,
    "_to_copy": 0, "clone": 0, "copy": 0, "_copy_from": 0, "where": 1, "masked_fill": 1,
}


def _pointwise(op: OpRecord) -> OpCost:
    out = op.outputs[0] if op.outputs else None
    if out is None:
        return _move(op)
    weight = POINTWISE_FLOPS.get(op.packet, 1)
    if out.dtype.is_complex:
        weight *= 4  # a complex multiply is 4 real multiplies and 2 adds
    return _move(op, {_simt_unit(out): float(weight * out.numel)} if weight else {})


REDUCTION_FLOPS = {"var": 3, "std": 3, "var_mean": 3, "std_mean": 3, "logsumexp": 3,
                   "linalg_vector_norm": 2, "norm": 2}


def _reduction(op: OpRecord) -> OpCost:
    source = max(_inputs(op), key=lambda t: t.numel, default=None)
    if source is None:
        return _move(op)
    weight = REDUCTION_FLOPS.get(op.packet, 1)
    return _move(op, {_simt_unit(source): float(weight * source.numel)})


@rule("copy_", "_to_copy", "clone", "contiguous", "_copy_from", "_copy_from_and_resize", "lift",
      "_unsafe_index", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d",
      "replication_pad1d", "replication_pad2d", "cat", "stack", "repeat", "flip", "roll",
      "tril", "triu", "narrow_copy", "slice_scatter", "select_scatter", "diagonal_scatter",
      "as_strided_scatter", "view_copy", "permute_copy", "transpose_copy", "expand_copy",
      "unfold_copy", "pixel_shuffle", "pixel_unshuffle", "im2col", "col2im", "_unsafe_view",
      "upsample_nearest2d", "upsample_bilinear2d", "masked_scatter", "index_fill", "tile",
      "split_with_sizes_copy", "unbind_copy", "_reshape_copy")
def _data_movement(op: OpRecord) -> OpCost:
    if op.packet == "copy_":  # reads the source, writes into self
        src = op.arg("src")
        return OpCost({}, float(src.nbytes), float(op.outputs[0].nbytes if op.outputs else 0))
    return _move(op)


@rule("_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax")
def _softmax(op: OpRecord) -> OpCost:
    """max, subtract, exp, sum, divide (or log): 5 FLOPs per element."""
    out = op.outputs[0]
    return _move(op, {_simt_unit(out): 5.0 * out.numel})


@rule("native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
      "_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "native_batch_norm",
      "_fused_rms_norm", "rms_norm", "instance_norm")
def _normalization(op: OpRecord) -> OpCost:
    """Mean, variance, normalise, scale and shift: ~8 FLOPs per element (RMSNorm ~5)."""
    source = max(_inputs(op), key=lambda t: t.numel)
    weight = 5 if "rms" in op.packet else 8
    return _move(op, {_simt_unit(source): float(weight * source.numel)})


@rule("cumsum", "cumprod", "_logcumsumexp", "logcumsumexp", "cummax", "cummin")
def _scan(op: OpRecord) -> OpCost:
    source = op.arg("self")
    weight = 3 if "logcumsumexp" in op.packet else 1
    return _move(op, {_simt_unit(source): float(weight * source.numel)})


@rule("topk")
def _topk(op: OpRecord) -> OpCost:
    """A per-row selection: about log2(k) comparisons per element."""
    source = op.arg("self")
    comparisons = max(1, math.ceil(math.log2(max(2, op.arg("k")))))
    return _move(op, {SIMT_FP32: float(comparisons * source.numel)})


@rule("sort", "argsort")
def _sort(op: OpRecord) -> OpCost:
    """A comparison sort of each row: log2(row length) comparisons per element."""
    source = op.arg("self")
    dim = op.arg("dim", -1)
    length = source.shape[dim] if source.shape else 1
    comparisons = max(1, math.ceil(math.log2(max(2, length))))
    return _move(op, {SIMT_FP32: float(comparisons * source.numel)})


@rule("max", "min", "argmax", "argmin", "kthvalue", "mode", "median", "nanmedian", "aminmax",
      "any", "all", "count_nonzero", "sum", "mean", "prod", "amax", "amin", "nansum", "var",
      "std", "var_mean", "std_mean", "logsumexp", "linalg_vector_norm", "norm")
def _reductions(op: OpRecord) -> OpCost:
    return _reduction(op)


# ---- pooling, activations and losses that carry no pointwise/reduction tag ----------------------

@rule("max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
      "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d",
      "avg_pool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "quantized_max_pool2d")
def _pool(op: OpRecord) -> OpCost:
    """A window of prod(kernel_size) taps per output element: one compare (max) or add (avg,
    plus the divide) per tap; the input is read once, outputs (and indices) written once."""
    out = op.outputs[0]
    dims = int(re.search(r"(\d)d", op.packet).group(1))
    kernel = op.arg("kernel_size")
    sizes = list(kernel) if isinstance(kernel, (list, tuple)) else [int(kernel)]
    taps = sizes[0] ** dims if len(sizes) == 1 else math.prod(sizes)  # one size: every dim
    return _move(op, {_simt_unit(out): float(out.numel * (taps + 1))})


@rule("adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
      "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d",
      "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool1d")
def _adaptive_pool(op: OpRecord) -> OpCost:
    """Windows tile the input: about one FLOP per input element, one per output element."""
    source, out = op.arg("self"), op.outputs[0]
    return _move(op, {_simt_unit(out): float(source.numel + out.numel)})


# FLOPs per element of activations and losses (pointwise work before any reduction).
ELEMENTWISE_FLOPS = {
    "hardswish": 4, "hardsigmoid": 3, "hardtanh": 2, "relu6": 2, "leaky_relu": 2, "elu": 3,
    "selu": 4, "celu": 4, "softsign": 3, "softshrink": 3, "hardshrink": 2, "tanhshrink": 5,
    "threshold": 1, "log_sigmoid_forward": 6, "log_sigmoid": 6, "_prelu_kernel": 2, "prelu": 2,
    "rrelu_with_noise": 3, "glu": 5,
    "native_dropout": 2, "dropout": 2, "smooth_l1_loss": 4, "huber_loss": 4, "mse_loss": 3,
    "l1_loss": 3, "soft_margin_loss": 5, "binary_cross_entropy": 6,
    "binary_cross_entropy_with_logits": 8, "kl_div": 4, "hinge_embedding_loss": 3,
    "margin_ranking_loss": 4, "multilabel_margin_loss_forward": 4, "multi_margin_loss": 4,
    "poisson_nll_loss": 4, "sign": 1, "sgn": 1, "heaviside": 1, "clamp_min": 1, "clamp_max": 1,
    "logical_not": 1, "bitwise_not": 1, "frac": 2, "nan_to_num": 2, "xlogy": 3,
}


@rule(*ELEMENTWISE_FLOPS)
def _elementwise(op: OpRecord) -> OpCost:
    """Weighted by the larger of the biggest input and the output (a loss reduces afterwards)."""
    tensors = [*_inputs(op), *op.outputs]
    if not tensors:
        return OpCost()
    widest = max(tensors, key=lambda t: t.numel)
    return _move(op, {_simt_unit(widest): float(ELEMENTWISE_FLOPS[op.packet] * widest.numel)})


@rule("_cdist_forward", "cdist", "_euclidean_dist")
def _cdist(op: OpRecord) -> OpCost:
    """Pairwise distances of [B, P, M] and [B, R, M]: 3 FLOPs (subtract, square, add) per
    (p, r, m) on the CUDA cores, plus a root per pair."""
    x1 = _inputs(op)[0]
    out = op.outputs[0]
    return _move(op, {_simt_unit(out): float(3 * out.numel * x1.shape[-1] + out.numel)})


# ---- gathers and scatters: only the touched rows move --------------------------------------------

@rule("embedding", "index_select", "index", "gather", "take", "_embedding_bag",
      "embedding_bag", "masked_select")
def _gather(op: OpRecord) -> OpCost:
    """Read the indices and the gathered elements (as many as the output holds); write them."""
    out_bytes = _bytes(op.outputs[:1])
    source = op.arg("weight") if op.packet in {"embedding", "embedding_bag"} else op.arg("self")
    index_bytes = _bytes([t for t in _inputs(op) if t is not source])
    return OpCost({}, index_bytes + min(out_bytes, float(source.nbytes)), out_bytes)


@rule("index_put", "index_put_", "_index_put_impl", "_index_put_impl_", "scatter", "scatter_",
      "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add",
      "index_add_", "index_copy", "index_copy_", "put_", "index_reduce", "index_reduce_")
def _scatter(op: OpRecord) -> OpCost:
    """Read the indices and the source; read-modify-write as many destination elements.

    Accumulating scatters (add/reduce) also read the touched destination elements and spend one
    FLOP per source element.
    """
    source = op.arg("values") or op.arg("src") or op.arg("source")
    if not isinstance(source, TensorInfo):  # a scalar fill
        written = sum(t.nbytes for t in _inputs(op) if not t.dtype.is_floating_point)
        return OpCost({}, float(written), float(written))
    destination = op.arg("self")
    indices = [t for t in _inputs(op) if t is not source and t is not destination]
    accumulate = bool(op.arg("accumulate")) or "add" in op.packet or "reduce" in op.packet
    moved = float(source.numel * destination.dtype.itemsize)
    read = _bytes(indices) + source.nbytes + (moved if accumulate else 0.0)
    flops = {_simt_unit(destination): float(source.numel)} if accumulate else {}
    return OpCost(flops, read, moved)


@rule("nll_loss_forward", "nll_loss", "nll_loss_nd", "nll_loss2d_forward")
def _nll_loss(op: OpRecord) -> OpCost:
    """Gathers one log-probability per target: reads the targets and N elements."""
    target = op.arg("target")
    logp = op.arg("self")
    gathered = target.numel * logp.dtype.itemsize
    return OpCost({SIMT_FP32: float(target.numel)}, float(target.nbytes + gathered),
                  _bytes(op.outputs))


@rule("nonzero", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim", "bincount",
      "repeat_interleave", "searchsorted", "bucketize", "multinomial", "argwhere", "histc",
      "one_hot", "_local_scalar_dense", "item")
def _indexing(op: OpRecord) -> OpCost:
    source = max(_inputs(op), key=lambda t: t.numel, default=None)
    flops = {SIMT_FP32: float(source.numel)} if source is not None else {}
    return _move(op, flops)


@rule("zeros", "ones", "full", "fill", "fill_", "zero_", "zeros_like", "ones_like", "full_like",
      "new_zeros", "new_ones", "new_full", "arange", "linspace", "logspace", "eye", "rand",
      "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "normal_",
      "uniform_", "bernoulli", "bernoulli_", "exponential_", "random_", "scalar_tensor",
      "randperm", "_to_dense", "masked_fill_", "tril_indices", "triu_indices")
def _writes(op: OpRecord) -> OpCost:
    """Creates or overwrites memory without reading any: only the output is written."""
    return OpCost({}, 0.0, _bytes(op.outputs))


# Ops that move no data at all: allocation without initialisation, aliasing, metadata.
FREE = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
    "lift_fresh", "lift_fresh_copy", "resize_", "set_", "_reshape_alias", "view_as_real",
    "view_as_complex", "_conj", "_neg_view", "conj", "resolve_conj", "resolve_neg", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "_assert_async", "_assert_scalar",
    "_functional_assert_async", "record_stream", "_nested_tensor_from_mask_left_aligned",
    "is_same_size", "_has_same_storage_numel", "prim", "device",
    "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk",  # views without the view tag
    "as_strided_",  # re-strides a tensor in place: metadata only
}
