"""Keys and values kept across ``simulate``'s rounds, as vLLM's paged KV cache keeps them.

Without a cache every verification round re-ran the target over the whole sequence and the drafter's first pass
over every verified row (issue 15: 2.4-8x slower than the engine simulate stands in for).  Here:

* the target keeps one :class:`SlotCache` per prompt.  A round writes the K+1 rows it verifies into the slots of
  their positions; the slots of rejected drafts are simply written again by the next round before anything reads
  them, as vLLM's scheduler reuses them.  All prompts' rows of one step go through the weights in one ragged pass
  (:func:`target_step`), as vLLM schedules them, so the weights stream through memory once per step, not once per
  prompt; the caches are rows of one block (:meth:`SlotCache.batch`), so a decode step attends for all prompts in
  one product;
* the drafter keeps its first pass's cache (:class:`DraftState`) over every verified row, and each round runs the
  first pass over the newly verified rows only; the recursive steps' rows (drafts) are dropped, so the next
  round's first-pass rows take their positions.  Every request's rows go through the drafter together, one
  ragged pass per proposer step (:func:`propose_batch`), as vLLM's proposer runs its batch: one request at a time
  streamed the drafter's ~35 MB of float32 weights 4 times per step on the SmolLM2 pair (2.4 s of its 8 s decode).

Every row sees the same keys and values as in a full re-run (causal attention: a row never reads a later one),
so the tokens are the same; ``tests/simulate/test_kv_cache.py`` checks this against the uncached path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..nn.attention import Cache, Ragged, attend_grouped
from ..rope.rotary import cos_sin, rotate_neox


class SlotCache:
    """One sequence's keys and values, slot i holding position i: one [layers, 2, kv_heads, capacity, head_dim] block.

    ``capacity``: the slots allocated at the first write, where the caller knows the furthest one (simulate:
    prompt + max_tokens + K); a write past them grows the block by doubling.  One block per sequence, not one
    buffer per layer: on the SmolLM2 pair, sizing 240 per-layer buffers exactly did not lower the peak RSS (they
    sat in the heap among the prefill's temporaries); one block, with last-row drafter logits, took it from 869
    to 841 MiB.  :meth:`batch` makes caches whose blocks are rows of one shared block instead.
    """

    def __init__(self, layers: int, capacity: int = 64, *, shared: SharedBlock | None = None, row: int = 0):
        self.layers, self.capacity = layers, capacity
        self.kv: torch.Tensor | None = None
        self.shared, self.row = shared, row  # while shared, kv is row ``row`` of shared.kv

    @classmethod
    def batch(cls, layers: int, capacity: int, count: int) -> list[SlotCache]:
        """``count`` caches whose slots are rows of one block [layers, 2, count, kv_heads, capacity, head_dim], so
        that a step whose segments all have the same number of rows attends for all of them in one product
        (target_step: a decode step's 30 layers x 4 prompts were 120 small attention calls).  A cache that grows
        past ``capacity`` leaves the block, and steps with it attend per segment again."""
        shared = SharedBlock(layers, count)
        return [cls(layers, capacity, shared=shared, row=i) for i in range(count)]

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Put k/v [h, n, d] in slots start..start+n-1 (overwriting what a rejected draft left there) and return
        the keys and values of slots 0..start+n-1."""
        end = start + k.shape[1]
        if self.kv is None and self.shared is not None:
            self.kv = self.shared.allocate(k, self.capacity)[:, :, self.row]
        kv = self.kv
        if kv is None or kv.shape[3] < end:
            cap = max(end, 2 * kv.shape[3] if kv is not None else self.capacity)  # doubling: amortised copies
            grown = k.new_empty(self.layers, 2, k.shape[0], cap, k.shape[2])
            if kv is not None:
                grown[:, :, :, :kv.shape[3]] = kv  # every layer's slots, those this step already wrote included
            kv, self.kv, self.shared = grown, grown, None
        kv[layer, 0, :, start:end] = k
        kv[layer, 1, :, start:end] = v
        return kv[layer, 0, :, :end], kv[layer, 1, :, :end]


class SharedBlock:
    """The block :meth:`SlotCache.batch`'s caches share, allocated at their first write.  Zeroed: a short
    sequence's slots past its end are masked in a batched attention, but still multiplied (0 x NaN is NaN)."""

    def __init__(self, layers: int, count: int):
        self.layers, self.count = layers, count
        self.kv: torch.Tensor | None = None

    def allocate(self, like: torch.Tensor, capacity: int) -> torch.Tensor:
        if self.kv is None:
            self.kv = like.new_zeros(self.layers, 2, self.count, like.shape[0], capacity, like.shape[2])
        return self.kv


@dataclass
class Segment:
    """One prompt's rows in a step: ``tokens`` at positions start.. (its cache holds every earlier position)."""

    cache: SlotCache
    tokens: Sequence[int]
    start: int
    logits_rows: slice = field(default_factory=lambda: slice(None))  # rows whose greedy token is needed


def target_step(target: Any, segments: Sequence[Segment], layer_ids: Sequence[int]
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One scheduled step of a native Llama/Qwen3 target over every segment's new rows, in one ragged batch.

    Per segment: the greedy token after each row of ``logits_rows`` and the captured states [n, sum Ht] at
    ``layer_ids`` (concatenated in the order given).  Projections and MLPs take all rows at once; attention runs
    per segment against its own slots.  The math is NativeTarget.forward's (vLLM's), row for row.
    """
    w, ops, eps, spec = target.w, target.ops, target.eps, target.spec
    nh, nkv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    qk_norm = bool(getattr(target.architecture, "qk_norm", False))
    device = w.device
    lengths = [len(s.tokens) for s in segments]
    starts = [sum(lengths[:i]) for i in range(len(segments))]  # each segment's first row in the batch
    ids = torch.tensor([[t for s in segments for t in s.tokens]], device=device)
    positions = torch.cat([torch.arange(s.start, s.start + n) for s, n in zip(segments, lengths)]).to(device)
    cos, sin = cos_sin(target.rope, d, positions, torch.float32)
    want = {i: n for n, i in enumerate(layer_ids)}
    captured: list[torch.Tensor | None] = [None] * len(layer_ids)
    h = w.embed(ids)  # [1, N, H]
    N = h.shape[1]
    for j in range(target.num_layers):
        if j in want:
            captured[want[j]] = h[0]
        p = f"layers.{j}."
        a = p + "self_attn."
        u = ops.rms_norm(h, w.get(p + "input_layernorm.weight"), eps)
        q = w.linear(u, a + "q_proj.weight", a + "q_proj.bias").view(1, N, nh, d)
        k = w.linear(u, a + "k_proj.weight", a + "k_proj.bias").view(1, N, nkv, d)
        v = w.linear(u, a + "v_proj.weight", a + "v_proj.bias").view(1, N, nkv, d)
        if qk_norm:
            q = ops.rms_norm(q, w.get(a + "q_norm.weight"), eps)
            k = ops.rms_norm(k, w.get(a + "k_norm.weight"), eps)
        q = rotate_neox(q.transpose(1, 2), cos, sin)[0]  # [nh, N, d]
        k = rotate_neox(k.transpose(1, 2), cos, sin)[0]
        v = v.transpose(1, 2)[0]
        kvs = [s.cache.write(j, s.start, k[:, r:r + n], v[:, r:r + n]) for s, r, n in zip(segments, starts, lengths)]
        shared = segments[0].cache.shared
        if shared is not None and shared.kv is not None and len(set(lengths)) == 1 and \
                all(s.cache.shared is shared for s in segments):
            # every segment's rows at once against its row of the shared block; slots past a segment's own
            # rows (a shorter prompt, rejected drafts) come after its queries' positions: masked
            B, n = len(segments), lengths[0]
            end = max(s.start for s in segments) + n
            block = shared.kv[j, :, :, :, :end]  # [2, count, kv_heads, end, d]
            members = [s.cache.row for s in segments]
            if members != list(range(shared.count)):
                block = block[:, members]
            o = attend_grouped(q.view(nh, B, n, d).transpose(0, 1), block[0], block[1], positions.view(B, n),
                               torch.arange(end, device=device), d ** -0.5).transpose(1, 2).reshape(1, N, nh * d)
        else:
            o = torch.cat([attend_grouped(q[None, :, r:r + n], keys[None], values[None], positions[r:r + n],
                                          torch.arange(keys.shape[1], device=device), d ** -0.5)[0]
                           for (keys, values), r, n in zip(kvs, starts, lengths)], dim=1)
            o = o.transpose(0, 1).reshape(1, N, nh * d)
        h = h + w.linear(o, a + "o_proj.weight", a + "o_proj.bias")
        u = ops.rms_norm(h, w.get(p + "post_attention_layernorm.weight"), eps)
        gate = w.linear(u, p + "mlp.gate_proj.weight")
        up = w.linear(u, p + "mlp.up_proj.weight")
        h = h + w.linear(F.silu(gate) * up, p + "mlp.down_proj.weight")
    if target.num_layers in want:
        captured[want[target.num_layers]] = h[0]
    states = torch.cat([c for c in captured if c is not None], dim=-1) if captured else h[0, :, :0]
    # logits only for the rows whose token is used (vLLM's logits_indices): the prefill's last row, every
    # verified row; the lm_head is the largest single weight
    picks = [torch.arange(st, st + n, device=device)[s.logits_rows] for s, st, n in zip(segments, starts, lengths)]
    rows = torch.cat(picks)
    normed = ops.rms_norm(h[:, rows], w.get("norm.weight"), eps)
    greedy = w.linear(normed, "lm_head.weight")[0].argmax(-1)
    out, at = [], 0
    for s, st, n, pick in zip(segments, starts, lengths, picks):
        out.append((greedy[at:at + len(pick)], states[st:st + n]))
        at += len(pick)
    return out


class DraftState:
    """One prompt's drafter cache over its verified rows: each round's first pass covers only the new ones."""

    def __init__(self) -> None:
        self.cache: list[Cache | None] | None = None  # per layer
        self.rows = 0  # first-pass rows cached: positions 0..rows-1


def propose_batch(model: Any, states: Sequence[DraftState], seqs: Sequence[Sequence[int]],
                  new_aux: Sequence[torch.Tensor], k: int) -> list[list[int]]:
    """vLLM's proposer for one round of every request at once: k drafts per request.

    Per request: ``seqs[i]`` every verified token (x_0..x_T), ``new_aux[i]`` the target's captured states of
    positions rows..T-1 (those its state has not seen).  A first pass over all requests' new rows, then k-1
    recursive steps of one row each, all in one ragged batch per pass (:class:`~eagleconv.nn.attention.Ragged`),
    as vLLM's proposer runs its batch: the drafter's weights stream once per pass, not once per request.  The
    recursive steps' rows are dropped afterwards: the next round's first pass takes their positions.
    """
    m = model
    ends = [len(s) - 1 for s in seqs]
    lengths = [T - st.rows for T, st in zip(ends, states)]
    ids = torch.tensor([[t for s, st, T in zip(seqs, states, ends) for t in s[st.rows + 1:T + 1]]])
    positions = torch.cat([torch.arange(st.rows, T) for st, T in zip(states, ends)])
    layers = range(m.spec.num_hidden_layers)
    cache = [Ragged(lengths, [st.cache[j] if st.cache else None for st in states]) for j in layers]
    last = torch.tensor(lengths).cumsum(0) - 1  # each request's last row: the only logits the proposer samples
    r = m.forward(ids, positions, m.combine(torch.cat(list(new_aux)).unsqueeze(0)), cache, logits_rows=last)
    for i, (st, T) in enumerate(zip(states, ends)):
        st.cache, st.rows = [_entries(c)[i] for c in r.cache], T
    toks, fb, step_cache = [r.logits[0].argmax(-1)], r.feedback[:, last], r.cache
    one = [1] * len(states)
    for step in range(2, k + 1):
        r = m.forward(toks[-1].unsqueeze(0), torch.tensor([T - 2 + step for T in ends]), fb,
                      [Ragged(one, _entries(c)) for c in step_cache])
        step_cache, fb = r.cache, r.feedback
        toks.append(r.logits[0].argmax(-1))
    return [[int(t[i]) for t in toks] for i in range(len(states))]


def _entries(cache: Cache | Ragged) -> list[Cache | None]:
    assert isinstance(cache, Ragged), "a pass over a Ragged cache returns one"
    return cache.entries
