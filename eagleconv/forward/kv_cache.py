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
so the tokens are the same; ``tests/simulation/test_kv_cache.py`` checks this against the uncached path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..nn.attention import Cache, LayerCache, Ragged, attend_grouped

if TYPE_CHECKING:
    from .native_target import NativeTarget
    from .protocols import DraftModel


class SlotCache:
    """One sequence's keys and values, slot i holding position i: one [layers, 2, kv_heads, capacity, head_dim] block.
    Where values are narrower than keys (MLA: qk_nope + qk_rope wide keys, v_head_dim wide values) the values fill
    the first ``dv`` of each slot's ``head_dim``.

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
        end, dv = start + k.shape[1], v.shape[2]
        if self.kv is None and self.shared is not None:
            self.kv = self.shared.allocate(k, v, self.capacity)[:, :, self.row]
        kv = self.kv
        if kv is None or kv.shape[3] < end:
            cap = max(end, 2 * kv.shape[3] if kv is not None else self.capacity)  # doubling: amortised copies
            grown = k.new_empty(self.layers, 2, k.shape[0], cap, max(k.shape[2], dv))
            if kv is not None:
                grown[:, :, :, :kv.shape[3]] = kv  # every layer's slots, those this step already wrote included
            kv, self.kv, self.shared = grown, grown, None
        kv[layer, 0, :, start:end, :k.shape[2]] = k
        kv[layer, 1, :, start:end, :dv] = v
        return kv[layer, 0, :, :end, :k.shape[2]], kv[layer, 1, :, :end, :dv]


class SharedBlock:
    """The block :meth:`SlotCache.batch`'s caches share, allocated at their first write.  Zeroed: a short
    sequence's slots past its end are masked in a batched attention, but still multiplied (0 x NaN is NaN)."""

    def __init__(self, layers: int, count: int):
        self.layers, self.count = layers, count
        self.kv: torch.Tensor | None = None

    def allocate(self, k: torch.Tensor, v: torch.Tensor, capacity: int) -> torch.Tensor:
        if self.kv is None:
            self.kv = k.new_zeros(self.layers, 2, self.count, k.shape[0], capacity, max(k.shape[2], v.shape[2]))
        return self.kv


@dataclass
class Segment:
    """One prompt's rows in a step: ``tokens`` at positions start.. (its cache holds every earlier position)."""

    cache: SlotCache
    tokens: Sequence[int]
    start: int
    logits_rows: slice = field(default_factory=lambda: slice(None))  # rows whose greedy token is needed


class SlotStep:
    """One layer's cache in a :func:`target_step`: every segment's slots, as the architecture's attention sees them.

    ``extend`` writes this step's keys and values into each segment's slots (nn.attention.extend calls it);
    ``attend`` runs each segment's queries against its own slots: in one product when the segments share a block
    and have as many rows each (a decode step), else segment by segment.
    """

    def __init__(self, segments: Sequence[Segment], layer: int, starts: Sequence[int], lengths: Sequence[int]):
        self.segments, self.layer, self.starts, self.lengths = segments, layer, starts, lengths
        self.kvs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.dk = self.dv = 0  # this step's key and value widths (extend sets them)

    def extend(self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> SlotStep:
        """k/v [1, kv_heads, N, d] of every segment's rows, in order: each written to its segment's slots."""
        k, v = k[0], v[0]
        self.dk, self.dv = k.shape[-1], v.shape[-1]
        self.kvs = [s.cache.write(self.layer, s.start, k[:, r:r + n], v[:, r:r + n])
                    for s, r, n in zip(self.segments, self.starts, self.lengths)]
        return self

    def attend(self, q: torch.Tensor, positions: torch.Tensor, scale: float) -> torch.Tensor:
        """q [1, nh, N, d] at ``positions`` [N] -> [1, nh, N, d]."""
        segments, lengths, j = self.segments, self.lengths, self.layer
        q = q[0]
        nh, N, d = q.shape
        device = q.device
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
            o = attend_grouped(q.view(nh, B, n, d).transpose(0, 1), block[0, ..., :self.dk], block[1, ..., :self.dv],
                               positions.view(B, n),
                               torch.arange(end, device=device), scale)  # [B, nh, n, dv]
            return o.transpose(0, 1).reshape(nh, N, o.shape[-1])[None]
        o = torch.cat([attend_grouped(q[None, :, r:r + n], keys[None], values[None], positions[r:r + n],
                                      torch.arange(keys.shape[1], device=device), scale)[0]
                       for (keys, values), r, n in zip(self.kvs, self.starts, lengths)], dim=1)
        return o[None]


def target_step(target: NativeTarget, segments: Sequence[Segment], layer_ids: Sequence[int]
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One scheduled step of a native Llama/Qwen3/DeepSeek-V3 target over every segment's new rows, in one ragged batch.

    Per segment: the greedy token after each row of ``logits_rows`` and the captured states [n, sum Ht] at
    ``layer_ids`` (concatenated in the order given).  The layers are NativeTarget.layers (the architecture's own
    decoder layer), with each layer's cache a :class:`SlotStep` over the segments' slots: projections and MLPs take
    all rows at once; attention runs per segment against its own slots.
    """
    w, ops, eps = target.w, target.ops, target.eps
    device = w.device
    lengths = [len(s.tokens) for s in segments]
    starts = [sum(lengths[:i]) for i in range(len(segments))]  # each segment's first row in the batch
    ids = torch.tensor([[t for s in segments for t in s.tokens]], device=device)
    positions = torch.cat([torch.arange(s.start, s.start + n) for s, n in zip(segments, lengths)]).to(device)
    want = {i: n for n, i in enumerate(layer_ids)}
    h, captured = target.layers(w.embed(ids), positions, lambda j: SlotStep(segments, j, starts, lengths), want)
    states = torch.cat([c for c in captured if c is not None], dim=-1) if captured else h[0, :, :0]
    # logits only for the rows whose token is used (vLLM's logits_indices): the prefill's last row, every
    # verified row; the lm_head is the largest single weight
    picks = [torch.arange(st, st + n, device=device)[s.logits_rows] for s, st, n in zip(segments, starts, lengths)]
    rows = torch.cat(picks)
    normed = target.architecture.rms_norm(ops, h[:, rows], w, "norm.weight", eps)
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


def propose_batch(model: DraftModel, states: Sequence[DraftState], seqs: Sequence[Sequence[int]],
                  new_aux: Sequence[torch.Tensor], k: int) -> list[list[int]]:
    """vLLM's proposer for one round of every request at once: k drafts per request (:func:`draft_batch`)."""
    toks, _ = draft_batch(model, states, seqs, new_aux, k)
    return [[int(t[i]) for t in toks] for i in range(len(states))]


def draft_batch(model: DraftModel, states: Sequence[DraftState], seqs: Sequence[Sequence[int]],
                new_aux: Sequence[torch.Tensor], k: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One proposer round of every request at once, per step: the draft tokens [S] and their logits [S, V] (what
    llama.cpp's early stop reads).

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
    toks, logits, _ = m.recurse(r.logits[0], r.feedback[0, last], r.cache, k, RaggedRows(ends))
    return toks, logits


@dataclass(frozen=True)
class RaggedRows:
    """Every request's one row side by side in a recursive draft step (batch of one, a Ragged cache per layer),
    as vLLM's proposer runs its batch; ``ends``: each request's last verified position + 1."""

    ends: Sequence[int]

    def ids(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.unsqueeze(0)

    def hidden(self, feedback: torch.Tensor) -> torch.Tensor:
        return feedback.unsqueeze(0)

    def positions(self, step: int) -> torch.Tensor:
        return torch.tensor([T - 2 + step for T in self.ends])

    def cache(self, cache: list[LayerCache]) -> Sequence[LayerCache]:
        one = [1] * len(self.ends)
        return [Ragged(one, _entries(c)) for c in cache]

    def pick(self, x: torch.Tensor) -> torch.Tensor:
        return x[0]


def _entries(cache: LayerCache) -> list[Cache | None]:
    assert isinstance(cache, Ragged), "a pass over a Ragged cache returns one"
    return cache.entries
