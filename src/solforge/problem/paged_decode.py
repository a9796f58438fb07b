"""Recognise batched decode attention over a paged KV cache (the op of FlashInfer's
BatchDecodeWithPagedKVCacheWrapper and FlashInfer-Trace's gqa_paged_decode definitions).

The structure, in this order: q [batch, q_heads, head_dim]; k_cache and v_cache, a pool of pages
[pages, page_size, kv_heads, head_dim] (NHD) or [pages, kv_heads, page_size, head_dim] (HND);
int32 kv_indptr [batch + 1], kv_indices [used pages] and kv_last_page_len [batch] (sequence b
owns pages kv_indices[kv_indptr[b]:kv_indptr[b + 1]], all full but the last, which holds
kv_last_page_len[b] tokens); a scalar softmax scale. One output shaped and typed as q. Query
head h reads KV head h // (q_heads / kv_heads).

Which layout, and that the reference computes plain attention (no soft cap, window or sinks), is
read off a run of it (probe.py) against a model of the op in float32.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from solforge.data.definition import Definition
from solforge.problem.probe import Inputs, Model, matching_variant

LAYOUTS = ("NHD", "HND")
# The probe's batch: three sequences over seven of twelve pages (some of several pages).
PROBE_BATCH, PROBE_USED_PAGES, PROBE_POOL = 3, 7, 12
PROBE_SCALE = 0.3  # not 1/sqrt(head_dim): the reference must use the scale it is given


@dataclass(frozen=True)
class PagedDecodeRoles:
    """Which definition names play which part, and the caches' layout."""

    q: str
    k_cache: str
    v_cache: str
    indptr: str
    indices: str
    last_page_len: str
    sm_scale: str
    out: str
    layout: str  # NHD or HND

    @property
    def kv_heads_dim(self) -> int:
        """The caches' dimension of KV heads (page_size is the other of 1 and 2)."""
        return 2 if self.layout == "NHD" else 1


def recognise_paged_decode(definition: Definition) -> PagedDecodeRoles | None:
    """The roles and layout of a paged decode the reference computes, or None. Runs the
    reference once on the CPU (a reference that cannot: None)."""
    names = _structure(definition)
    if names is None:
        return None
    q_spec, cache_spec = definition.inputs[names[0]], definition.inputs[names[1]]
    q_heads = _const(definition, q_spec.shape[1])
    layouts = [layout for layout in LAYOUTS
               if _fits(q_heads, _const(definition, cache_spec.shape[2 if layout == "NHD" else 1]))]
    variants = {layout: paged_decode_model(PagedDecodeRoles(*names, layout=layout))
                for layout in layouts}
    if not variants:
        return None
    axes = {q_spec.shape[0]: PROBE_BATCH, cache_spec.shape[0]: PROBE_POOL,
            definition.inputs[names[4]].shape[0]: PROBE_USED_PAGES}
    var_axes = {name: axes.get(name, PROBE_BATCH) for name in definition.var_axes}
    found = matching_variant(definition, var_axes, {names[6]: PROBE_SCALE}, variants)
    return None if found is None else PagedDecodeRoles(*names, layout=found)


def _structure(definition: Definition) -> tuple[str, ...] | None:
    """The eight names (seven inputs, one output) when the shapes and dtypes fit, else None."""
    if len(definition.inputs) != 7 or len(definition.outputs) != 1:
        return None
    q, k, v, indptr, indices, last, scale = definition.inputs.values()
    (out,) = definition.outputs.values()
    tensors = (q, k, v, indptr, indices, last)
    if not scale.is_scalar or any(spec.is_scalar for spec in tensors) or out.is_scalar:
        return None
    if len(q.shape) != 3 or len(k.shape) != 4 or k.shape != v.shape or out.shape != q.shape:
        return None
    if k.shape[3] != q.shape[2] or out.dtype != q.dtype or k.dtype != v.dtype:
        return None
    if q.dtype.kind != "float" or k.dtype.kind != "float" or scale.dtype.kind != "float":
        return None
    if any(spec.dtype.name != "int32" or len(spec.shape) != 1 for spec in (indptr, indices, last)):
        return None
    if last.shape != q.shape[:1] or indptr.shape == last.shape:
        return None
    return (q.name, k.name, v.name, indptr.name, indices.name, last.name, scale.name, out.name)


def _const(definition: Definition, axis: str) -> int | None:
    spec = definition.axes[axis]
    return spec.value if spec.kind == "const" else None


def _fits(q_heads: int | None, kv_heads: int | None) -> bool:
    """Whether query heads can share KV heads evenly (unknown sizes: let the probe decide)."""
    return q_heads is None or kv_heads is None or (kv_heads > 0 and q_heads % kv_heads == 0)


def paged_decode_model(roles: PagedDecodeRoles) -> Model:
    """Each sequence's tokens gathered page by page, softmax(q k^T * scale) v in float32, one
    rounding to q's dtype."""

    def model(inputs: Inputs) -> list[torch.Tensor]:
        q, scale = inputs[roles.q], float(inputs[roles.sm_scale])
        k_pages, v_pages = (_token_major(inputs[name], roles.layout)
                            for name in (roles.k_cache, roles.v_cache))
        indptr, indices = inputs[roles.indptr].tolist(), inputs[roles.indices].long()
        last = inputs[roles.last_page_len].tolist()
        page_size, kv_heads = k_pages.shape[1], k_pages.shape[2]
        rows = []
        for b, (start, end) in enumerate(itertools.pairwise(indptr)):
            length = (end - start - 1) * page_size + last[b]
            pages = indices[start:end]
            k = k_pages[pages].flatten(0, 1)[:length].float()  # [tokens, kv_heads, dim]
            v = v_pages[pages].flatten(0, 1)[:length].float()
            group = q.shape[1] // kv_heads
            query = q[b].float().view(kv_heads, group, q.shape[2])
            weights = torch.softmax(torch.einsum("hgd,thd->hgt", query, k) * scale, dim=-1)
            rows.append(torch.einsum("hgt,thd->hgd", weights, v).reshape(q.shape[1:]))
        return [torch.stack(rows).to(q.dtype)]

    return model


def _token_major(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The cache as [pages, page_size, kv_heads, head_dim]."""
    return cache if layout == "NHD" else cache.transpose(1, 2)
