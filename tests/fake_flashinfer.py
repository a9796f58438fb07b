"""A stand-in `flashinfer` for the CPU: the documented semantics of the calls the library
baselines make, written independently of the mappings that generate those calls (complex
products for the rotation, SDPA over a token list built index by index for paged decode, SDPA
per sequence with the documented lower-right causal mask for ragged prefill), so a baseline's
own code can run without a GPU."""

from __future__ import annotations

import sys
import types

import torch


def install(monkeypatch) -> None:
    """Put the stand-in in sys.modules for the test's length."""
    def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cache, is_neox=True):
        assert query.dim() == 2 and key.dim() == 2 and cache.dtype == torch.float32
        half = cache.shape[1] // 2
        turn = torch.complex(cache[positions, :half], cache[positions, half:])[:, None, :]

        def rotate(x):
            x = x.view(x.shape[0], -1, head_size).float()
            if is_neox:
                pairs = torch.complex(x[..., :half], x[..., half:]) * turn
                out = torch.cat((pairs.real, pairs.imag), dim=-1)
            else:
                pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], half, 2).contiguous())
                out = torch.view_as_real(pairs * turn).flatten(-2)
            return out.reshape(x.shape[0], -1)

        return rotate(query).to(query.dtype), rotate(key).to(key.dtype)

    def top_k_renorm_probs(probs, top_k):
        pivot = probs.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
        kept = probs * (probs >= pivot)
        return kept / kept.sum(dim=-1, keepdim=True)

    def rmsnorm(x, weight, eps=1e-6, offset=0.0):
        x32 = x.float()
        scaled = x32 / torch.sqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
        return (scaled * (offset + weight.float())).to(x.dtype)

    def gemma_rmsnorm(x, weight, eps=1e-6):
        return rmsnorm(x, weight, eps, offset=1.0)

    module = types.ModuleType("flashinfer")
    module.norm = types.SimpleNamespace(rmsnorm=rmsnorm, gemma_rmsnorm=gemma_rmsnorm)
    module.rope = types.SimpleNamespace(apply_rope_with_cos_sin_cache=apply_rope_with_cos_sin_cache)
    module.sampling = types.SimpleNamespace(top_k_renorm_probs=top_k_renorm_probs)
    module.BatchDecodeWithPagedKVCacheWrapper = PagedDecodeWrapper
    module.BatchPrefillWithRaggedKVCacheWrapper = RaggedPrefillWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", module)


class PagedDecodeWrapper:
    """BatchDecodeWithPagedKVCacheWrapper's documented semantics: `plan` takes the page table
    and sizes, `run` attends each sequence's query to its tokens (SDPA over a token list built
    index by index, not the recogniser's model). Counts its plans."""

    plans = 0

    def __init__(self, workspace, kv_layout="NHD", use_tensor_cores=False):
        assert workspace.dtype == torch.uint8 and not workspace.any()  # zeroed for first use
        self.layout = kv_layout

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, *, q_data_type, kv_data_type, sm_scale):
        type(self).plans += 1
        self.table = (indptr.tolist(), indices.tolist(), last_page_len.tolist())
        self.sizes = (num_qo_heads, num_kv_heads, head_dim, page_size, sm_scale)

    def run(self, q, paged_kv_cache):
        indptr, indices, last = self.table
        heads, kv_heads, dim, page_size, scale = self.sizes
        k_cache, v_cache = paged_kv_cache
        assert q.shape[1:] == (heads, dim) and k_cache.shape[3] == dim
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            pages = indices[indptr[b]:indptr[b + 1]]
            slots = [(p, t) for p in pages for t in range(page_size)]
            slots = slots[:len(slots) - page_size + last[b]]
            k = torch.stack([self.token(k_cache, p, t) for p, t in slots], dim=1).float()
            v = torch.stack([self.token(v_cache, p, t) for p, t in slots], dim=1).float()
            attended = torch.nn.functional.scaled_dot_product_attention(
                q[b].float()[:, None], k.repeat_interleave(heads // kv_heads, 0),
                v.repeat_interleave(heads // kv_heads, 0), scale=scale)
            out[b] = attended[:, 0].to(q.dtype)
        return out

    def token(self, cache, page, slot):
        """[kv_heads, head_dim] of one token."""
        return cache[page, slot] if self.layout == "NHD" else cache[page, :, slot]


class RaggedPrefillWrapper:
    """BatchPrefillWithRaggedKVCacheWrapper's documented semantics: `plan` takes the two
    indptrs and sizes, `run` attends each sequence's queries to its own keys, masked (when
    causal) by torch.tril(ones(qo_len, kv_len), diagonal=kv_len - qo_len) as its docstring's
    example builds the causal mask. Counts its plans."""

    plans = 0

    def __init__(self, float_workspace_buffer, kv_layout="NHD"):
        assert float_workspace_buffer.dtype == torch.uint8 and not float_workspace_buffer.any()
        assert kv_layout == "NHD"

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, *,
             causal=False, sm_scale=None, q_data_type="float16", kv_data_type=None):
        type(self).plans += 1
        self.indptrs = (qo_indptr.tolist(), kv_indptr.tolist())
        self.sizes = (num_qo_heads, num_kv_heads, head_dim_qk)
        self.causal, self.scale = causal, sm_scale

    def run(self, q, k, v):
        (qo, kv), (heads, kv_heads, dim) = self.indptrs, self.sizes
        assert q.shape[1:] == (heads, dim) and k.shape[1:] == (kv_heads, dim)
        out = torch.empty_like(q)
        for b in range(len(qo) - 1):
            queries = q[qo[b]:qo[b + 1]].float().transpose(0, 1)  # [heads, qo_len, dim]
            keys, values = (x[kv[b]:kv[b + 1]].float().transpose(0, 1)
                            .repeat_interleave(heads // kv_heads, 0) for x in (k, v))
            mask = None
            if self.causal:
                qo_len, kv_len = queries.shape[1], keys.shape[1]
                mask = torch.tril(torch.ones(qo_len, kv_len, dtype=torch.bool),
                                  diagonal=kv_len - qo_len)
            attended = torch.nn.functional.scaled_dot_product_attention(
                queries, keys, values, attn_mask=mask, scale=self.scale)
            out[qo[b]:qo[b + 1]] = attended.transpose(0, 1).to(q.dtype)
        return out
