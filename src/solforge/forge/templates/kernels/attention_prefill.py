"""Attention forward for prefill: softmax(q k^T * scale [+ causal mask]) v, with GQA.

q is [batch, seq, q_heads, dim], k and v [batch, seq, kv_heads, dim]: query head h reads KV
head h // (q_heads / kv_heads). Program (m, batch * q_heads + h) owns BLOCK_M queries of one
head and streams the keys and values in BLOCK_N blocks (FlashAttention-2's loop): scores
q k^T by tl.dot, an online softmax (running maximum and sum, rescaled when the maximum grows,
in base 2: the scale folded with log2(e)), and the output accumulated in float32; the score
matrix never reaches memory. With CAUSAL, a query block stops at its own diagonal block, and
the blocks run longest first (the last query blocks, which see the most keys, are scheduled
first, so no long block is left alone at the end). Only the key blocks that cross the diagonal
or the end of the sequence are masked; those wholly below it or inside it are loaded and scored
without a check. NUM_STAGES pipelines the K and V loads. On the GPU the
probabilities are rounded to v's dtype for the second tensor-core product.

Triton 3.6's interpreter mis-computes tl.dot on bfloat16 operands (numpy has no bfloat16),
so when the kernel runs in the interpreter (TRITON_INTERPRET=1, on the CPU) the operands are
widened to float32 first: bf16 products are exact in float32, only the order of the float32
sums differs. Compiled for a GPU, WIDEN is off and the kernel is unchanged.
"""

import math

import torch
import triton
import triton.language as tl

# Template parameters (rewritten by render).
BLOCK_M = 64
BLOCK_N = 64
NUM_STAGES = 2
NUM_WARPS = 4
# What the problem computes (identified by the template's probe).
CAUSAL = True

LOG2_E = 1.4426950408889634


@triton.jit
def _attend(q, acc, l_i, m_i, k_base, v_base, rows, dims, start, stop, seq_len, k_seq_stride,
            v_seq_stride, scale_log2, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            WIDEN: tl.constexpr, BLOCK_N: tl.constexpr):
    """The online softmax over the key blocks [start, stop); MASKED blocks check the keys
    against seq_len and (CAUSAL) against each query row, the others need neither."""
    for start_n in range(start, stop, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        if MASKED:
            col_mask = cols < seq_len
            k = tl.load(k_base + cols[None, :] * k_seq_stride + dims[:, None],
                        mask=col_mask[None, :], other=0.0)  # [HEAD_DIM, BLOCK_N]
            v = tl.load(v_base + cols[:, None] * v_seq_stride + dims[None, :],
                        mask=col_mask[:, None], other=0.0)
        else:
            k = tl.load(k_base + cols[None, :] * k_seq_stride + dims[:, None])
            v = tl.load(v_base + cols[:, None] * v_seq_stride + dims[None, :])
        if WIDEN:
            k, v = k.to(tl.float32), v.to(tl.float32)
        scores = tl.dot(q, k) * scale_log2
        if MASKED:
            keep = col_mask[None, :]
            if CAUSAL:
                keep = keep & (rows[:, None] >= cols[None, :])
            scores = tl.where(keep, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_prefill(q_ptr, k_ptr, v_ptr, out_ptr, seq_len, n_q_heads, group, scale_log2,
                       q_batch_stride, q_seq_stride, q_head_stride, k_batch_stride,
                       k_seq_stride, k_head_stride, v_batch_stride, v_seq_stride,
                       v_head_stride, out_batch_stride, out_seq_stride, out_head_stride,
                       CAUSAL: tl.constexpr,
                       WIDEN: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    block = tl.program_id(0)
    if CAUSAL:  # the longest rows (the last query blocks) start first: no lone tail at the end
        block = tl.num_programs(0) - 1 - block
    start_m = block * BLOCK_M
    batch = tl.program_id(1) // n_q_heads
    head = tl.program_id(1) % n_q_heads
    kv_head = head // group
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + batch.to(tl.int64) * q_batch_stride + head * q_head_stride
    k_base = k_ptr + batch.to(tl.int64) * k_batch_stride + kv_head * k_head_stride
    v_base = v_ptr + batch.to(tl.int64) * v_batch_stride + kv_head * v_head_stride
    q = tl.load(q_base + rows[:, None] * q_seq_stride + dims[None, :],
                mask=(rows < seq_len)[:, None], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # Key blocks wholly below the diagonal (causal) or wholly inside seq_len need no mask; the
    # rest (the diagonal's, the ragged tail) do. Every row sees an unmasked key first.
    if CAUSAL:
        unmasked = (start_m // BLOCK_N) * BLOCK_N
        end = tl.minimum(seq_len, start_m + BLOCK_M)
    else:
        unmasked = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    acc, l_i, m_i = _attend(q, acc, l_i, m_i, k_base, v_base, rows, dims, 0, unmasked, seq_len,
                            k_seq_stride, v_seq_stride, scale_log2, False, CAUSAL, WIDEN,
                            BLOCK_N)
    acc, l_i, m_i = _attend(q, acc, l_i, m_i, k_base, v_base, rows, dims, unmasked, end,
                            seq_len, k_seq_stride, v_seq_stride, scale_log2, True, CAUSAL,
                            WIDEN, BLOCK_N)
    out = acc / l_i[:, None]
    out_base = out_ptr + batch.to(tl.int64) * out_batch_stride + head * out_head_stride
    tl.store(out_base + rows[:, None] * out_seq_stride + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(rows < seq_len)[:, None])


def attention_prefill(q, k, v, out):
    batch, seq_len, n_q_heads, head_dim = q.shape
    group = n_q_heads // k.shape[2]
    scale_log2 = LOG2_E / math.sqrt(head_dim)
    widen = triton.knobs.runtime.interpret and q.dtype == torch.bfloat16
    grid = (triton.cdiv(seq_len, BLOCK_M), batch * n_q_heads)
    _attention_prefill[grid](
        q, k, v, out, seq_len, n_q_heads, group, scale_log2, *q.stride()[:3], *k.stride()[:3],
        *v.stride()[:3], *out.stride()[:3], CAUSAL=CAUSAL, WIDEN=widen, HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
