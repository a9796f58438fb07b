"""Attention for decode, split over the KV cache: one new query token per sequence.

q is [batch, q_heads, dim], the caches [batch, kv_len, kv_heads, dim]; query head h reads KV
head h // group. One query row per head leaves a GPU idle unless the work is spread along the
cache, so the cache is cut into splits of SPLIT_LEN keys (FlashDecoding):
- the first kernel gives each (sequence, KV head, block of BLOCK_H of its query heads, split) a
  program that streams the split's keys and values in BLOCK_N blocks, scores all the group's
  query heads at once with tl.dot (the KV tile is read once for the whole group), and keeps an
  online softmax; it writes its running maximum m, sum l and unnormalised output (float32);
- the second kernel merges a head's splits: M = max m_s, out = sum exp(m_s - M) acc_s /
  sum exp(m_s - M) l_s, walking the splits SPLIT_BLOCK at a time.
DRAM traffic: the caches once, plus the partial results (about batch * q_heads * splits * dim
floats, small next to the cache). Softmax in base 2 (the scale folded with log2(e)).

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
BLOCK_H = 16
BLOCK_N = 64
SPLIT_LEN = 512
NUM_STAGES = 2
NUM_WARPS = 4

LOG2_E = 1.4426950408889634
SPLIT_BLOCK = 16  # splits merged per step of the second kernel


@triton.jit
def _decode_split(q_ptr, k_ptr, v_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, kv_len, n_q_heads,
                  n_kv_heads, group, scale_log2, q_batch_stride, q_head_stride,
                  k_batch_stride, k_seq_stride, k_head_stride, v_batch_stride, v_seq_stride,
                  v_head_stride, SPLIT_LEN: tl.constexpr, WIDEN: tl.constexpr,
                  HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    head_blocks = tl.cdiv(group, BLOCK_H)
    batch = tl.program_id(0) // (n_kv_heads * head_blocks)
    kv_head = tl.program_id(0) // head_blocks % n_kv_heads
    in_group = tl.program_id(0) % head_blocks * BLOCK_H + tl.arange(0, BLOCK_H)
    head_mask = in_group < group
    heads = kv_head * group + in_group
    split = tl.program_id(1)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + batch.to(tl.int64) * q_batch_stride + heads[:, None] * q_head_stride
                + dims[None, :], mask=head_mask[:, None], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    k_base = k_ptr + batch.to(tl.int64) * k_batch_stride + kv_head * k_head_stride
    v_base = v_ptr + batch.to(tl.int64) * v_batch_stride + kv_head * v_head_stride
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    start = split * SPLIT_LEN
    end = tl.minimum(start + SPLIT_LEN, kv_len)
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        col_mask = cols < end
        k = tl.load(k_base + cols[None, :].to(tl.int64) * k_seq_stride + dims[:, None],
                    mask=col_mask[None, :], other=0.0)  # [HEAD_DIM, BLOCK_N]
        v = tl.load(v_base + cols[:, None].to(tl.int64) * v_seq_stride + dims[None, :],
                    mask=col_mask[:, None], other=0.0)
        if WIDEN:
            k, v = k.to(tl.float32), v.to(tl.float32)
        scores = tl.where(col_mask[None, :], tl.dot(q, k) * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    slots = (batch * n_q_heads + heads).to(tl.int64) * tl.num_programs(1) + split
    tl.store(part_m_ptr + slots, m_i, mask=head_mask)
    tl.store(part_l_ptr + slots, l_i, mask=head_mask)
    tl.store(part_acc_ptr + slots[:, None] * HEAD_DIM + dims[None, :], acc,
             mask=head_mask[:, None])


@triton.jit
def _decode_merge(part_acc_ptr, part_m_ptr, part_l_ptr, out_ptr, n_q_heads, num_splits,
                  out_batch_stride, out_head_stride, HEAD_DIM: tl.constexpr,
                  SPLIT_BLOCK: tl.constexpr):
    batch = tl.program_id(0) // n_q_heads
    head = tl.program_id(0) % n_q_heads
    first_slot = tl.program_id(0).to(tl.int64) * num_splits
    dims = tl.arange(0, HEAD_DIM)
    m_run = float("-inf")
    l_run = 0.0
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for start in range(0, num_splits, SPLIT_BLOCK):
        splits = start + tl.arange(0, SPLIT_BLOCK)
        present = splits < num_splits
        m_s = tl.load(part_m_ptr + first_slot + splits, mask=present, other=float("-inf"))
        l_s = tl.load(part_l_ptr + first_slot + splits, mask=present, other=0.0)
        acc_s = tl.load(part_acc_ptr + (first_slot + splits)[:, None] * HEAD_DIM + dims[None, :],
                        mask=present[:, None], other=0.0)
        m_new = tl.maximum(m_run, tl.max(m_s, axis=0))
        weight = tl.exp2(m_s - m_new)
        alpha = tl.exp2(m_run - m_new)
        l_run = l_run * alpha + tl.sum(l_s * weight, axis=0)
        acc = acc * alpha + tl.sum(acc_s * weight[:, None], axis=0)
        m_run = m_new
    out = acc / l_run
    tl.store(out_ptr + batch.to(tl.int64) * out_batch_stride + head * out_head_stride + dims,
             out.to(out_ptr.dtype.element_ty))


def attention_decode(q, k_cache, v_cache, out):
    batch, n_q_heads, head_dim = q.shape
    kv_len, n_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = n_q_heads // n_kv_heads
    num_splits = triton.cdiv(kv_len, SPLIT_LEN)
    partial = dict(dtype=torch.float32, device=q.device)
    part_acc = torch.empty((batch, n_q_heads, num_splits, head_dim), **partial)
    part_m = torch.empty((batch, n_q_heads, num_splits), **partial)
    part_l = torch.empty((batch, n_q_heads, num_splits), **partial)
    widen = triton.knobs.runtime.interpret and q.dtype == torch.bfloat16
    grid = (batch * n_kv_heads * triton.cdiv(group, BLOCK_H), num_splits)
    _decode_split[grid](
        q, k_cache, v_cache, part_acc, part_m, part_l, kv_len, n_q_heads, n_kv_heads, group,
        LOG2_E / math.sqrt(head_dim), q.stride(0), q.stride(1), *k_cache.stride()[:3],
        *v_cache.stride()[:3], SPLIT_LEN=SPLIT_LEN, WIDEN=widen, HEAD_DIM=head_dim,
        BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, num_stages=NUM_STAGES, num_warps=NUM_WARPS)
    _decode_merge[(batch * n_q_heads,)](
        part_acc, part_m, part_l, out, n_q_heads, num_splits, out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, SPLIT_BLOCK=SPLIT_BLOCK, num_warps=4)
