"""Keys and values kept across ``simulate``'s rounds, as vLLM's paged KV cache keeps them.

Without a cache every verification round re-ran the target over the whole sequence and the drafter's first pass
over every verified row (issue 15: 2.4-8x slower than the engine simulate stands in for).  Here:

* the target keeps one :class:`SlotCache` per prompt.  A round writes the K+1 rows it verifies into the slots of
  their positions; the slots of rejected drafts are simply written again by the next round before anything reads
  them, as vLLM's scheduler reuses them.  All prompts' rows of one step go through the weights in one ragged pass
  (:func:`target_step`), as vLLM schedules them, so the weights stream through memory once per step, not once per
  prompt;
* the drafter keeps its first pass's cache (:class:`DraftState`) over every verified row, and each round runs the
  first pass over the newly verified rows only; the recursive steps' rows (drafts) are dropped, so the next
  round's first-pass rows take their positions.

Every row sees the same keys and values as in a full re-run (causal attention: a row never reads a later one),
so the tokens are the same; ``tests/test_simulate_cache.py`` checks this against the uncached path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..nn.attention import Cache, attend_grouped
from ..rope.rotary import cos_sin, rotate_neox


class SlotCache:
    """One sequence's keys and values, slot i holding position i: one [layers, 2, kv_heads, capacity, head_dim] block.

    ``capacity``: the slots allocated at the first write, where the caller knows the furthest one (simulate:
    prompt + max_tokens + K); a write past them grows the block by doubling.  One block per sequence, not one
    buffer per layer: on the SmolLM2 pair, sizing 240 per-layer buffers exactly did not lower the peak RSS (they
    sat in the heap among the prefill's temporaries); one block, with last-row drafter logits, took it from 869
    to 841 MiB.
    """

    def __init__(self, layers: int, capacity: int = 64):
        self.layers, self.capacity = layers, capacity
        self.kv: torch.Tensor | None = None

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Put k/v [h, n, d] in slots start..start+n-1 (overwriting what a rejected draft left there) and return
        the keys and values of slots 0..start+n-1."""
        end = start + k.shape[1]
        kv = self.kv
        if kv is None or kv.shape[3] < end:
            cap = max(end, 2 * kv.shape[3] if kv is not None else self.capacity)  # doubling: amortised copies
            grown = k.new_empty(self.layers, 2, k.shape[0], cap, k.shape[2])
            if kv is not None:
                grown[:, :, :, :kv.shape[3]] = kv  # every layer's slots, those this step already wrote included
            kv = self.kv = grown
        kv[layer, 0, :, start:end] = k
        kv[layer, 1, :, start:end] = v
        return kv[layer, 0, :, :end], kv[layer, 1, :, :end]


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
        outs, row = [], 0
        for s, n in zip(segments, lengths):
            keys, values = s.cache.write(j, s.start, k[:, row:row + n], v[:, row:row + n])
            outs.append(attend_grouped(q[None, :, row:row + n], keys[None], values[None], positions[row:row + n],
                                       torch.arange(keys.shape[1], device=device), d ** -0.5)[0])
            row += n
        o = torch.cat(outs, dim=1).transpose(0, 1).reshape(1, N, nh * d)
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
    starts = [sum(lengths[:i]) for i in range(len(segments))]
    picks = [torch.arange(st, st + n, device=device)[s.logits_rows] for s, st, n in zip(segments, starts, lengths)]
    rows = torch.cat(picks)
    normed = ops.rms_norm(h[:, rows], w.get("norm.weight"), eps)
    greedy = w.linear(normed, "lm_head.weight")[0].argmax(-1)
    out, at = [], 0
    for s, st, n, pick in zip(segments, starts, lengths, picks):
        out.append((greedy[at:at + len(pick)], states[st:st + n]))
        at += len(pick)
    return out


LAST = slice(-1, None)  # logits for the last row only: vLLM's proposer samples nothing else


class DraftState:
    """One prompt's drafter cache over its verified rows: each round's first pass covers only the new ones."""

    def __init__(self, model: Any):
        self.model = model
        self.cache: list[Cache] | None = None
        self.rows = 0  # first-pass rows cached: positions 0..rows-1

    def propose(self, tokens: Sequence[int], new_aux: torch.Tensor, k: int) -> list[int]:
        """vLLM's proposer for one round: ``tokens`` every verified token (x_0..x_T), ``new_aux`` the target's
        captured states of positions rows..T-1 (those not yet seen); a first pass over those rows, then k-1
        recursive steps whose rows are dropped afterwards (the next round's first pass takes their slots)."""
        m, T = self.model, len(tokens) - 1
        start = self.rows
        ids = torch.tensor([list(tokens[start + 1:T + 1])])
        r = m.forward(ids, torch.arange(start, T), m.combine(new_aux.unsqueeze(0)), self.cache, logits_rows=LAST)
        self.cache, self.rows = r.cache, T
        toks = [r.logits[:, -1].argmax(-1)]
        fb, cache = r.feedback[:, -1], r.cache
        for step in range(2, k + 1):
            r = m.forward(toks[-1].unsqueeze(1), torch.tensor([T - 2 + step]), fb.unsqueeze(1), cache, logits_rows=LAST)
            cache, fb = r.cache, r.feedback[:, -1]
            toks.append(r.logits[:, -1].argmax(-1))
        return [int(t[0]) for t in toks]
