"""Rotary position embedding of q and k from a cos/sin cache indexed by each token's position.

Row p of the cache holds cos(p * f_i) for the head_dim / 2 frequencies, then sin(p * f_i)
(vLLM's layout). Channel pairs rotate by their angle: (i, i + head_dim / 2) in the half-rotation
(NeoX, Llama) layout, (2i, 2i + 1) in the interleaved (GPT-J) one. k may have no head axis (one
key shared by all heads, as DeepSeek's MLA rope key).

Program (t, g) rotates TOKENS tokens x HEADS heads: q's heads for the first groups g, k's for
the rest, with the cos and sin rows loaded once for all of them. DRAM traffic is the fused
minimum: q and k read once and written once, one cache row per token (L2 afterwards).
Float32 rotation, one rounding to the output dtype.
"""

import triton
import triton.language as tl

# Template parameters (rewritten by render).
TOKENS = 1
HEADS = 8
NUM_WARPS = 2
# What the problem computes (identified by the template's probe).
INTERLEAVED = False


@triton.jit
def _rotate_heads(src_ptr, dst_ptr, tokens, token_mask, heads, n_heads, src_token_stride,
                  src_head_stride, dst_token_stride, dst_head_stride, cos, sin,
                  HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Rotate a [tokens, heads, pairs] block: first' = a cos - b sin, second' = b cos + a sin."""
    pairs = tl.arange(0, HALF)
    if INTERLEAVED:
        first, second = 2 * pairs, 2 * pairs + 1
    else:
        first, second = pairs, pairs + HALF
    mask = token_mask[:, None, None] & (heads < n_heads)[None, :, None]
    tokens, heads = tokens[:, None, None], heads[None, :, None]
    src = src_ptr + tokens * src_token_stride + heads * src_head_stride
    dst = dst_ptr + tokens * dst_token_stride + heads * dst_head_stride
    a = tl.load(src + first[None, None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(src + second[None, None, :], mask=mask, other=0.0).to(tl.float32)
    out_dtype = dst_ptr.dtype.element_ty
    tl.store(dst + first[None, None, :], (a * cos - b * sin).to(out_dtype), mask=mask)
    tl.store(dst + second[None, None, :], (b * cos + a * sin).to(out_dtype), mask=mask)


@triton.jit
def _rope(q_ptr, k_ptr, positions_ptr, cache_ptr, q_out_ptr, k_out_ptr, n_tokens, n_q_heads,
          n_k_heads, q_token_stride, q_head_stride, k_token_stride, k_head_stride,
          q_out_token_stride, q_out_head_stride, k_out_token_stride, k_out_head_stride,
          cache_stride, HALF: tl.constexpr, INTERLEAVED: tl.constexpr, TOKENS: tl.constexpr,
          HEADS: tl.constexpr):
    tokens = tl.program_id(0) * TOKENS + tl.arange(0, TOKENS)
    token_mask = tokens < n_tokens
    tokens = tl.minimum(tokens, n_tokens - 1).to(tl.int64)
    positions = tl.load(positions_ptr + tokens).to(tl.int64)
    cache_rows = cache_ptr + positions[:, None] * cache_stride + tl.arange(0, HALF)[None, :]
    cos = tl.load(cache_rows).to(tl.float32)[:, None, :]
    sin = tl.load(cache_rows + HALF).to(tl.float32)[:, None, :]
    q_groups = tl.cdiv(n_q_heads, HEADS)
    group = tl.program_id(1)
    if group < q_groups:
        heads = group * HEADS + tl.arange(0, HEADS)
        _rotate_heads(q_ptr, q_out_ptr, tokens, token_mask, heads, n_q_heads, q_token_stride,
                      q_head_stride, q_out_token_stride, q_out_head_stride, cos, sin, HALF,
                      INTERLEAVED)
    else:
        heads = (group - q_groups) * HEADS + tl.arange(0, HEADS)
        _rotate_heads(k_ptr, k_out_ptr, tokens, token_mask, heads, n_k_heads, k_token_stride,
                      k_head_stride, k_out_token_stride, k_out_head_stride, cos, sin, HALF,
                      INTERLEAVED)


def _heads_and_stride(x):
    """(heads, head stride) of a [tokens, heads, dim] or a headless [tokens, dim] tensor."""
    return (x.shape[1], x.stride(1)) if x.dim() == 3 else (1, 0)


def rope(q, k, positions, cos_sin_cache, q_out, k_out):
    n_tokens, head_dim = q.shape[0], q.shape[-1]
    n_q_heads, q_head_stride = _heads_and_stride(q)
    n_k_heads, k_head_stride = _heads_and_stride(k)
    _, q_out_head_stride = _heads_and_stride(q_out)
    _, k_out_head_stride = _heads_and_stride(k_out)
    grid = (triton.cdiv(n_tokens, TOKENS),
            triton.cdiv(n_q_heads, HEADS) + triton.cdiv(n_k_heads, HEADS))
    _rope[grid](q, k, positions, cos_sin_cache, q_out, k_out, n_tokens, n_q_heads, n_k_heads,
                q.stride(0), q_head_stride, k.stride(0), k_head_stride, q_out.stride(0),
                q_out_head_stride, k_out.stride(0), k_out_head_stride, cos_sin_cache.stride(0),
                HALF=head_dim // 2, INTERLEAVED=INTERLEAVED, TOKENS=TOKENS, HEADS=HEADS,
                num_warps=NUM_WARPS)
