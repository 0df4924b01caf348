"""The reference drafter forward: vLLM's EAGLE-3/3.1 math in plain PyTorch (vLLM: llama_eagle3.py, deepseek_eagle3.py, llm_base_proposer.py).

One request batch of B equal-length sequences, greedy.  ``draft`` runs the
first pass over all T scheduled rows (token x_{p+1}, position p, combined
target features G_p) and then K-1 single-row recursion steps, each embedding
the previous draft token at the next position and feeding back the pre-norm
hidden state (EAGLE-3) or the post-norm one (``norm_output``), with the
drafter's own KV cache over context and drafts, as vLLM's proposer does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .. import architectures
from ..spec.drafter import DrafterSpec
from ..nn.attention import LayerCache
from ..rope.rotary import ResolvedRope, resolve_rope
from .ops import NormOps, get_ops
from .weights import BlockCache, TensorSource, UnrunnableDrafter, Weights, stored_name

COMPUTE_DTYPES = ("float32", "float64", "checkpoint")
_CHECKPOINT_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}


def rope_of(spec: DrafterSpec) -> ResolvedRope:
    """The spec's RoPE as vLLM runs it; an absent theta is the architecture's engine default (reported in notes)."""
    return resolve_rope(spec.rope, spec.architecture, architectures.get(spec.architecture).default_rope_theta)


# Tensors the forward replaces when absent (the target's rows, or seeded synthetic ones; d2t/t2d: identity).
_FALLBACKS = ("embed_tokens.weight", "lm_head.weight", "d2t", "t2d")


def forward_problems(spec: DrafterSpec, source: TensorSource) -> list[tuple[str, str]]:
    """(canonical name, problem) for each tensor the forward reads that is missing or misshapen (header shapes only).

    Biases are read whenever present, so a present bias is checked against its weight's rows even when the
    config does not declare one.
    """
    from ..spec.canonical import expected_tensors

    names = source.names()
    expected = expected_tensors(spec)
    if not architectures.get(spec.architecture).reads_norm_before_fc:
        expected.pop("input_norm.weight", None)
    out: list[tuple[str, str]] = []
    for name, exp in expected.items():
        if name == "t2d" and "d2t" in names:
            continue  # read only without d2t; the ids either gives are checked once read (Drafter._vocab_problems)
        if name not in names:
            if exp.required and name not in _FALLBACKS:
                out.append((name, f"is missing ({exp.why})"))
            continue
        shape = tuple(source.raw(name).shape)
        if shape != exp.shape:
            out.append((name, f"has shape {list(shape)}, the config implies {list(exp.shape)} ({exp.why})"))
            continue
        bias = name.removesuffix(".weight") + ".bias"
        if name.endswith(".weight") and len(exp.shape) == 2 and bias in names and bias not in expected:
            got = tuple(source.raw(bias).shape)
            if got != exp.shape[:1]:
                out.append((bias, f"has shape {list(got)}, its weight implies {list(exp.shape[:1])}"))
    return out


@dataclass
class DraftInputs:
    """tokens [B, T+1] (x_0..x_T, target vocab ids; x_T is the target's sampled token) and
    aux [B, T, K*Ht]: the captured target states of x_0..x_{T-1}, concatenated in ascending layer order."""

    tokens: torch.Tensor
    aux: torch.Tensor
    source: str = "synthetic"
    aux_ids: tuple[int, ...] = ()  # hidden_state_index ids of the aux chunks, ascending
    notes: list[str] = field(default_factory=list)


@dataclass
class StepOutput:
    """One forward call: logits over the target vocabulary, the post-norm state and the state fed back."""

    logits: torch.Tensor  # [B, n, V] (the rows of logits_rows), -inf outside the draft vocabulary
    out: torch.Tensor  # [B, n, H] post-norm (lm_head input)
    feedback: torch.Tensor  # [B, n, H]
    cache: list[LayerCache]


@dataclass
class DraftResult:
    """K draft steps: per step the draft tokens [B], the last row's logits [B, V] and the fed-back state [B, H]."""

    tokens: list[torch.Tensor]
    logits: list[torch.Tensor]
    feedback: list[torch.Tensor]
    first_pass_logits: torch.Tensor  # [B, T, V]: step 1 over every scheduled row

    def feedback_rms(self) -> list[float]:
        return [float(f.double().pow(2).mean().sqrt()) for f in self.feedback]


class Rows(Protocol):
    """Where each sequence's row lies in a recursive draft step (Drafter.recurse), and the cache it continues."""

    def ids(self, tokens: torch.Tensor) -> torch.Tensor: ...  # draft tokens [S] -> the step's ids

    def hidden(self, feedback: torch.Tensor) -> torch.Tensor: ...  # fed-back states [S, H] -> the step's hidden

    def positions(self, step: int) -> torch.Tensor: ...  # the step's positions

    def cache(self, cache: list[LayerCache]) -> Sequence[LayerCache]: ...  # the last pass's -> this one's

    def pick(self, x: torch.Tensor) -> torch.Tensor: ...  # a pass's [B, n, ...] -> each sequence's row [S, ...]


@dataclass(frozen=True)
class DenseRows:
    """S sequences of equal length T as the batch axis, one row each per recursive step (Drafter.draft)."""

    T: int

    def ids(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.unsqueeze(1)

    def hidden(self, feedback: torch.Tensor) -> torch.Tensor:
        return feedback.unsqueeze(1)

    def positions(self, step: int) -> torch.Tensor:
        return torch.tensor([self.T - 2 + step])

    def cache(self, cache: list[LayerCache]) -> Sequence[LayerCache]:
        return cache

    def pick(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1]


class Drafter:
    """A drafter ready to run: spec, weights by canonical name, compute dtype, norm ops."""

    def __init__(self, spec: DrafterSpec, source: TensorSource, *, dtype: str = "float32", recipe: str = "native",
                 backend: str = "torch", seed: int = 0, target_embed: torch.Tensor | None = None,
                 target_lm_head: torch.Tensor | None = None, device: str = "cpu", path: str | None = None,
                 notes: list[str] | None = None, cache: BlockCache | None = None, pack: bool = False):
        if dtype not in COMPUTE_DTYPES:
            raise ValueError(f"unknown compute dtype {dtype!r}; choose one of {', '.join(COMPUTE_DTYPES)}")
        self.spec, self.path, self.device = spec, path, device
        self.notes: list[str] = list(notes or [])
        if dtype == "checkpoint":
            self.dtype = _CHECKPOINT_DTYPES.get(spec.dtype or "", torch.float32)
            if spec.dtype not in _CHECKPOINT_DTYPES:
                self.notes.append(f"checkpoint dtype {spec.dtype} is not a compute dtype; computing in float32")
        else:
            self.dtype = getattr(torch, dtype)
        self.compute_dtype = str(self.dtype).removeprefix("torch.")
        self.ops: NormOps = get_ops(backend, recipe)
        arch = architectures.get(spec.architecture)
        self.rope = rope_of(spec)
        self.notes += list(self.rope.notes)
        if spec.rms_norm_eps is None:  # the engine's config class for the family falls back to its own
            self.eps = arch.default_rms_norm_eps
            self.notes.append(f"rms_norm_eps absent: the engine's config-class default {self.eps:g}")
        else:
            self.eps = float(spec.rms_norm_eps)
        self.w = Weights(source, self.dtype, width=spec.hidden_size, seed=seed, target_embed=target_embed,
                         target_lm_head=target_lm_head, device=device, cache=cache, pack=pack)
        self.arch = arch  # owns the decoder layer: its norms, attention and MLP
        problems = forward_problems(spec, source)
        if not problems:
            self.target_ids = self._draft_to_target()
            problems = self._vocab_problems()
        if problems:
            raise UnrunnableDrafter([(stored_name(source, n), why) for n, why in problems], path)
        self.logit_scale = float(spec.extra.get("logit_scale", 1.0) or 1.0)

    # -- pieces -----------------------------------------------------------------
    def _draft_to_target(self) -> torch.Tensor:
        """Target-vocabulary id of each draft id: arange(Vd) + d2t (vLLM reads d2t as offsets)."""
        Vd = self.spec.draft_vocab_size
        if self.w.has("d2t"):
            return torch.arange(Vd) + self.w.source.raw("d2t").to(torch.int64)[:Vd].cpu()
        if self.w.has("t2d") and self.spec.compressed_vocab:
            ids = torch.nonzero(self.w.source.raw("t2d").to(torch.bool)).flatten()[:Vd]
            self.notes.append("d2t absent: draft->target ids derived from t2d")
            return ids.cpu()
        return torch.arange(Vd)

    def _vocab_problems(self) -> list[tuple[str, str]]:
        """d2t/t2d must give one target id per draft id, each inside the target vocabulary."""
        ids, Vd, V = self.target_ids, self.spec.draft_vocab_size, self.spec.vocab_size
        name = "d2t" if self.w.has("d2t") else "t2d"
        if len(ids) != Vd:
            return [(name, f"gives {len(ids)} target ids for a draft vocabulary of {Vd}")]
        if len(ids) and not (0 <= int(ids.min()) and int(ids.max()) < V):
            return [(name, f"maps draft ids to target ids {int(ids.min())}..{int(ids.max())}, outside the "
                           f"vocabulary 0..{V - 1}")]
        return []

    def combine(self, aux: torch.Tensor) -> torch.Tensor:
        """combine_hidden_states: [.., K*Ht] -> [.., H] (input_norm, fc_norm per chunk, fc)."""
        spec, w, ops, arch = self.spec, self.w, self.ops, self.arch
        a = aux.to(device=self.device, dtype=self.dtype)
        if not spec.flags.use_aux_hidden_state:
            return a
        if spec.flags.norm_before_fc and arch.reads_norm_before_fc:
            a = arch.rms_norm(ops, a, w, "input_norm.weight", self.eps)
        if spec.flags.fc_norm:
            K = spec.aux.count
            a = ops.fc_norm_concat(a.chunk(K, dim=-1), [arch.norm_scale(w.get(f"fc_norm.{i}.weight")) for i in range(K)],
                                   self.eps)
        return w.linear(a, "fc.weight", "fc.bias", keep=False)  # once per draft: caching it would crowd out the layers

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor,
                cache: Sequence[LayerCache | None] | None = None,
                logits_rows: slice | torch.Tensor = slice(None)) -> StepOutput:
        """One drafter pass: ids [B, n], positions [n], hidden [B, n, H] (combined features or fed-back state).

        ``cache``: per layer, the keys/values of earlier positions; a Ragged entry runs several sequences' rows
        side by side (forward.kv_cache.propose_batch).  ``logits_rows``: the rows whose logits are computed (default
        all; a slice or row indices).  A proposer samples each sequence's last row only, and full-vocabulary
        logits for every first-pass row were ~10 MB per call on a 49k vocabulary.
        """
        spec, w, ops, eps, arch = self.spec, self.w, self.ops, self.eps, self.arch
        hidden = hidden.to(device=self.device, dtype=self.dtype)
        positions = positions.to(self.device)
        new_cache: list[LayerCache] = []
        m = res = None
        for j in range(spec.num_hidden_layers):
            p = f"layers.{j}."
            if j == 0:  # EAGLE-3's first layer reads cat(norm(embeds), norm(hidden)), 2H wide
                en = arch.rms_norm(ops, w.embed(ids), w, p + "input_layernorm.weight", eps)
                gn = arch.rms_norm(ops, hidden, w, p + "hidden_norm.weight", eps)
                res = gn if spec.flags.norm_before_residual else hidden
                u = torch.cat([en, gn], dim=-1)  # embeddings first, then the hidden state
            else:
                assert m is not None and res is not None
                u, res = arch.add_rms_norm(ops, m, res, w, p + "input_layernorm.weight", eps)
            m, res, layer_cache = arch.decoder_layer(u, res, positions, cache[j] if cache else None, w, p, spec,
                                                     self.rope, ops, eps)
            new_cache.append(layer_cache)
            w.release()
        assert m is not None and res is not None
        out, pre = arch.add_rms_norm(ops, m, res, w, "norm.weight", eps)
        feedback = out if spec.flags.norm_output else pre
        z = w.lm_head(out[:, logits_rows], spec.draft_vocab_size, self.target_ids)
        if self.logit_scale != 1.0:
            z = z * self.logit_scale
        full = z.new_full((*z.shape[:-1], spec.vocab_size), float("-inf"))
        full[..., self.target_ids.to(self.device)] = z
        w.release()
        return StepOutput(full, out, feedback, new_cache)

    def draft(self, inputs: DraftInputs, steps: int = 4, on_step: Callable[[int], None] | None = None) -> DraftResult:
        """K greedy draft steps from one verification round's inputs; ``on_step(k)`` after step k (progress)."""
        if steps < 1:
            raise ValueError("steps must be >= 1")
        tokens = inputs.tokens.to(self.device)
        T = tokens.shape[1] - 1
        with torch.no_grad():
            g = self.combine(inputs.aux)
            r = self.forward(tokens[:, 1:], torch.arange(T), g)
            toks, logits, fbs = self.recurse(r.logits[:, -1], r.feedback[:, -1], r.cache, steps, DenseRows(T), on_step)
        return DraftResult(toks, logits, fbs, r.logits)

    def recurse(self, logits: torch.Tensor, feedback: torch.Tensor, cache: list[LayerCache], steps: int,
                rows: Rows, on_step: Callable[[int], None] | None = None
                ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """vLLM's proposer after its first pass: steps 2..``steps``, each embedding the previous draft token at the
        next position with the fed-back state, over the cache (per step: tokens [S], logits [S, V], feedback
        [S, H] of each of S sequences).  ``logits``/``feedback``: the first pass's row of each sequence; ``rows``
        where the sequences lie in a pass (:class:`DenseRows`: a batch of equal sequences, as ``draft`` runs
        them; forward.kv_cache.RaggedRows: side by side, as simulate's proposer batch)."""
        toks, out_logits, fbs = [logits.argmax(-1)], [logits], [feedback]
        if on_step is not None:
            on_step(1)
        for k in range(2, steps + 1):
            r = self.forward(rows.ids(toks[-1]), rows.positions(k), rows.hidden(fbs[-1]), rows.cache(cache))
            cache = r.cache
            toks.append(rows.pick(r.logits).argmax(-1))
            out_logits.append(rows.pick(r.logits))
            fbs.append(rows.pick(r.feedback))
            if on_step is not None:
                on_step(k)
        return toks, out_logits, fbs

    @property
    def packed_weights(self) -> int:
        """How many of its weights are multiplied packed for oneDNN so far (``pack=True``: forward.weights.Weights)."""
        return self.w.packed_weights

    def borrowed(self, *others: Drafter) -> list[str]:
        """Which borrowed rows were synthetic in the runs so far (the report says so); with ``others`` (diff's B),
        one note for all of them, counting the token ids any used, not one per drafter (issue 35 item 9)."""
        out = []
        embed_ids = set(self.w.synthetic_embed_ids).union(*(o.w.synthetic_embed_ids for o in others))
        if embed_ids:
            out.append(f"embed_tokens is the target's and no --target was given: seeded synthetic rows for the "
                       f"{len(embed_ids)} token ids used (no vocabulary table was built)")
        if self.w.synthetic_lm_head or any(o.w.synthetic_lm_head for o in others):
            out.append("lm_head is the target's and no --target was given: seeded synthetic rows, generated in blocks")
        return out

    def describe(self) -> dict[str, str]:
        return {"compute_dtype": self.compute_dtype, "recipe": self.ops.recipe, "backend": self.ops.backend}
