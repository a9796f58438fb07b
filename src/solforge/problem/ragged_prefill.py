"""Recognise batched prefill attention over a ragged batch (the op of FlashInfer's
BatchPrefillWithRaggedKVCacheWrapper and FlashInfer-Trace's gqa_ragged_prefill definitions).

The structure, in this order: q [total_q, q_heads, head_dim]; k and v [total_kv, kv_heads,
head_dim] (NHD: the prompts' tokens back to back); int32 qo_indptr and kv_indptr [batch + 1]
(sequence b's queries are rows qo_indptr[b] .. qo_indptr[b + 1] - 1 of q, its keys and values
rows kv_indptr[b] .. kv_indptr[b + 1] - 1 of k and v); a scalar softmax scale. One output shaped
and typed as q. Query head h reads KV head h // (q_heads / kv_heads).

Whether the reference masks causally, and that it computes plain attention with the scale it
is given (no soft cap, window or sinks), is read off a run of it (probe.py) against a model of
the op in float32. Causal follows FlashInfer's alignment: query i of a sequence of qo_len
queries and kv_len keys sees keys 0 .. i + kv_len - qo_len (the queries are the last tokens).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from solforge.data.definition import Definition
from solforge.problem.probe import Inputs, Model, matching_variant

PROBE_BATCH, PROBE_TOKENS = 3, 13  # three prompts sharing thirteen tokens
PROBE_SCALE = 0.3  # not 1/sqrt(head_dim): the reference must use the scale it is given


@dataclass(frozen=True)
class RaggedPrefillRoles:
    """Which definition names play which part, and whether the mask is causal."""

    q: str
    k: str
    v: str
    qo_indptr: str
    kv_indptr: str
    sm_scale: str
    out: str
    causal: bool


def recognise_ragged_prefill(definition: Definition) -> RaggedPrefillRoles | None:
    """The roles of a ragged prefill the reference computes, causal or not, or None. Runs the
    reference once on the CPU (a reference that cannot: None)."""
    names = _structure(definition)
    if names is None:
        return None
    q_spec, k_spec = definition.inputs[names[0]], definition.inputs[names[1]]
    tokens = {q_spec.shape[0]: PROBE_TOKENS, k_spec.shape[0]: PROBE_TOKENS}
    var_axes = {name: tokens.get(name, PROBE_BATCH) for name in definition.var_axes}
    variants = {causal: ragged_prefill_model(RaggedPrefillRoles(*names, causal=causal))
                for causal in (True, False)}
    found = matching_variant(definition, var_axes, {names[5]: PROBE_SCALE}, variants)
    return None if found is None else RaggedPrefillRoles(*names, causal=found)


def _structure(definition: Definition) -> tuple[str, ...] | None:
    """The seven names (six inputs, one output) when the shapes and dtypes fit, else None."""
    if len(definition.inputs) != 6 or len(definition.outputs) != 1:
        return None
    q, k, v, qo_indptr, kv_indptr, scale = definition.inputs.values()
    (out,) = definition.outputs.values()
    tensors = (q, k, v, qo_indptr, kv_indptr)
    if not scale.is_scalar or any(spec.is_scalar for spec in tensors) or out.is_scalar:
        return None
    if len(q.shape) != 3 or len(k.shape) != 3 or k.shape != v.shape or out.shape != q.shape:
        return None
    if k.shape[2] != q.shape[2] or out.dtype != q.dtype or k.dtype != v.dtype:
        return None
    if q.dtype.kind != "float" or k.dtype.kind != "float" or scale.dtype.kind != "float":
        return None
    if any(spec.dtype.name != "int32" or len(spec.shape) != 1 for spec in (qo_indptr, kv_indptr)):
        return None
    if qo_indptr.shape != kv_indptr.shape:
        return None
    return (q.name, k.name, v.name, qo_indptr.name, kv_indptr.name, scale.name, out.name)


def ragged_prefill_model(roles: RaggedPrefillRoles) -> Model:
    """Each sequence's queries against its own keys, softmax(q k^T * scale) v in float32
    (causal: aligned at the last token), one rounding to q's dtype. Rows of q that no
    sequence owns are left zero."""

    def model(inputs: Inputs) -> list[torch.Tensor]:
        q, k, v = (inputs[name] for name in (roles.q, roles.k, roles.v))
        scale = float(inputs[roles.sm_scale])
        out = torch.zeros(q.shape, dtype=torch.float32)
        group = q.shape[1] // k.shape[1]
        sequences = zip(itertools.pairwise(inputs[roles.qo_indptr].tolist()),
                        itertools.pairwise(inputs[roles.kv_indptr].tolist()))
        for (q_start, q_end), (kv_start, kv_end) in sequences:
            query = q[q_start:q_end].float()  # [queries, q_heads, dim]
            keys = k[kv_start:kv_end].float().repeat_interleave(group, dim=1)
            values = v[kv_start:kv_end].float().repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", query, keys) * scale
            if roles.causal:
                shift = (kv_end - kv_start) - (q_end - q_start)
                rows = torch.arange(q_end - q_start)[:, None]
                scores = scores.masked_fill(torch.arange(kv_end - kv_start) > rows + shift,
                                            float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            out[q_start:q_end] = torch.einsum("hqk,khd->qhd", weights, values)
        return [out.to(q.dtype)]

    return model
