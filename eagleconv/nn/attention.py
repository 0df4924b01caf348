"""Causal attention over a drafter's KV cache, the piece every architecture's attention is written with.

``Architecture.attention`` (eagleconv/architectures/*.py) takes the layer input ``u`` [B, n, in], the positions of its
rows [n], the layer's KV cache entry (keys/values of earlier positions, or
None) and returns (output [B, n, H], new cache entry).  Attention is causal
over the drafter's own cache, softmax in float32 (float64 in a float64
reference), as vLLM's backends accumulate it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .norm import acc_dtype

Cache = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # keys [B, h, L, dk], values [B, h, L, dv], positions [L]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
            scale: float) -> torch.Tensor:
    """Causal softmax attention: q [B, h, n, d], k/v [B, h, L, d*] -> [B, h, n, dv] in q's dtype.  ``q_pos`` [n],
    or [B, n] where each batch row has its own positions (simulate's batched decode step)."""
    acc = acc_dtype(q.dtype)
    scores = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    mask = k_pos > q_pos.unsqueeze(-1)  # [(B,) n, L]: a key after the query is hidden
    if mask.dim() == 3:
        mask = mask.unsqueeze(1)  # per batch row, every head alike
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v.to(acc)).to(q.dtype)


def attend_grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                   scale: float) -> torch.Tensor:
    """:func:`attend` with grouped-query heads: q [B, nh, n, d], k/v [B, nkv, L, d*], nh a multiple of nkv (query
    head h reads kv head h // (nh // nkv)) -> [B, nh, n, dv].  Each kv head's query heads go through attention as
    rows of one head, so keys and values are never copied per query head (repeat_interleave did, every call)."""
    B, nh, n, d = q.shape
    nkv = k.shape[1]
    if nh == nkv:
        return attend(q, k, v, q_pos, k_pos, scale)
    rep = nh // nkv
    out = attend(q.reshape(B, nkv, rep * n, d), k, v, q_pos.repeat(*[1] * (q_pos.dim() - 1), rep), k_pos, scale)
    return out.reshape(B, nh, n, out.shape[-1])


@dataclass
class Ragged:
    """Several sequences' rows side by side in one pass (vLLM's flattened batch), each with its own cache.

    The weights stream through memory once for all of them; only attention is per sequence.  ``lengths[i]``: this
    pass's rows of sequence i, in order along the row axis; ``entries[i]``: its cache before them (None: none).
    """

    lengths: list[int]
    entries: list[Cache | None]


@runtime_checkable
class KVStore(Protocol):
    """A cache that keeps its keys and values itself (forward.kv_cache.SlotStep: a target's slots): the
    architectures' attention hands it this pass's keys and values and asks it to attend."""

    def extend(self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> KVStore: ...

    def attend(self, q: torch.Tensor, q_pos: torch.Tensor, scale: float) -> torch.Tensor: ...


LayerCache = Cache | Ragged | KVStore
"""What a decoder layer's attention is given and returns: the drafter's (keys, values, positions), several
sequences' side by side (Ragged), or a store that keeps them (KVStore); None before the first pass."""


def extend(cache: LayerCache | None, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> LayerCache:
    """The cache with this pass's keys/values [B, h, n, d*] at positions [n] appended (per sequence if Ragged)."""
    if isinstance(cache, KVStore):
        return cache.extend(k, v, pos)
    if isinstance(cache, Ragged):
        n = cache.lengths
        return Ragged(n, [_extend(e, *new) for e, new in zip(cache.entries, zip(k.split(n, 2), v.split(n, 2),
                                                                                    pos.split(n)))])
    return _extend(cache, k, v, pos)


def _extend(cache: Cache | None, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> Cache:
    if cache is None:
        return k, v, pos
    return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2), torch.cat([cache[2], pos])


def attend_cache(q: torch.Tensor, cache: LayerCache | None, q_pos: torch.Tensor, scale: float) -> torch.Tensor:
    """:func:`attend_grouped` of q [B, nh, n, d] at positions [n] against what :func:`extend` returned; with a
    Ragged cache each sequence's rows attend to its own entry only."""
    if isinstance(cache, KVStore):
        return cache.attend(q, q_pos, scale)
    if isinstance(cache, Ragged):
        n = cache.lengths
        return torch.cat([attend_cache(qi, e, pi, scale) for qi, pi, e in zip(q.split(n, 2), q_pos.split(n),
                                                                               cache.entries)], dim=2)
    if cache is None:
        raise ValueError("attend_cache needs the cache extend() returned, this pass's keys included")
    return attend_grouped(q, cache[0], cache[1], q_pos, cache[2], scale)
