"""Recognise a rotary position embedding of q and k through a cos/sin cache, and its pairing.

The forge's RoPE template and the FlashInfer RoPE baseline both need to know the same two
things: which inputs play which role, and whether the reference rotates NeoX halves or GPT-J
interleaved pairs. Both are read here, once, from the definition's structure and a run of the
reference (probe.py).

The structure: inputs q [tokens, q_heads, dim], k [tokens, k_heads, dim] (or [tokens, dim]: one
key for all heads), integer positions [tokens] and a floating cos/sin cache [max_positions, dim]
whose row p is [cos | sin] of position p, in that order; outputs shaped as q and k, of q's dtype.
Problems that compute their angles inside the reference (theta, YaRN or llama3 scaling, M-RoPE
streams) do not fit: their constants are not in the structure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from solforge.data.definition import Definition
from solforge.problem.probe import FLOAT_DTYPES, Inputs, Model, matching_variant, small_axes


@dataclass(frozen=True)
class RopeRoles:
    """Which definition names play which part in a cache RoPE, and its pairing."""

    q: str
    k: str
    positions: str
    cache: str
    q_out: str
    k_out: str
    dim_axis: str
    q_heads_axis: str
    k_heads_axis: str | None  # None: k has no head axis
    interleaved: bool  # GPT-J pairs (2i, 2i + 1); False: NeoX halves (i, i + dim / 2)


def recognise_rope(definition: Definition) -> RopeRoles | None:
    """The roles and pairing of a cache RoPE the reference computes, or None. Runs the
    reference once on the CPU (a reference that cannot: None)."""
    roles = rope_roles(definition)
    if roles is None:
        return None
    variants = {interleaved: rope_model(roles, interleaved) for interleaved in (False, True)}
    found = matching_variant(definition, small_axes(definition), {}, variants)
    return None if found is None else replace(roles, interleaved=found)


def rope_roles(definition: Definition) -> RopeRoles | None:
    """The roles, from the structure alone (pairing not yet known: NeoX assumed)."""
    if len(definition.inputs) != 4 or len(definition.outputs) != 2:
        return None
    if any(spec.is_scalar for spec in definition.inputs.values()):
        return None
    q, k, positions, cache = definition.inputs.values()
    q_out, k_out = definition.outputs.values()
    if len(q.shape) != 3 or len(k.shape) not in (2, 3) or q_out.shape != q.shape:
        return None
    if k_out.shape != k.shape or k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        return None
    if positions.shape != q.shape[:1] or positions.dtype.kind != "int":
        return None
    if len(cache.shape) != 2 or cache.shape[1] != q.shape[-1]:
        return None
    if any(spec.dtype.name not in FLOAT_DTYPES for spec in (cache, q, k)):
        return None
    if not (q.dtype == k.dtype == q_out.dtype == k_out.dtype):
        return None
    k_heads = k.shape[1] if len(k.shape) == 3 else None
    return RopeRoles(q.name, k.name, positions.name, cache.name, q_out.name, k_out.name,
                     q.shape[2], q.shape[1], k_heads, False)


def rope_model(roles: RopeRoles, interleaved: bool) -> Model:
    """The rotation in float32, one rounding to q's dtype: what the template's kernel and
    FlashInfer's compute."""

    def model(inputs: Inputs) -> list[torch.Tensor]:
        rows = inputs[roles.cache][inputs[roles.positions]].to(torch.float32)
        cos, sin = rows.chunk(2, dim=-1)  # [tokens, dim / 2]
        k = inputs[roles.k]
        k_cos, k_sin = (cos[:, None], sin[:, None]) if k.dim() == 3 else (cos, sin)
        return [rotate(inputs[roles.q], cos[:, None], sin[:, None], interleaved),
                rotate(k, k_cos, k_sin, interleaved)]

    return model


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           interleaved: bool) -> torch.Tensor:
    """x's pairs (a, b) turned to (a cos - b sin, b cos + a sin) in float32, in x's dtype."""
    x32 = x.to(torch.float32)
    if interleaved:
        a, b = x32[..., 0::2], x32[..., 1::2]
        return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2).to(x.dtype)
    a, b = x32.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(x.dtype)
