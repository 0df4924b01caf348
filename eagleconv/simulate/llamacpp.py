"""``simulate --engine llama.cpp``: llama-speculative-simple's loop (llama.cpp b11434), one request at a time.

What differs from vLLM's proposer (``eagleconv.simulate``), read in llama.cpp b11434's code
(``examples/speculative-simple/speculative-simple.cpp``, ``common/speculative.cpp``, eagle3 impl):

* the prompt's last token is not sampled first: the target evaluates ``prompt[:-1]``, the drafter drafts from
  (``prompt[-1]``, the features of ``prompt[:-1]``), and the first target sample is verified together with
  that draft; a one-token prompt has no features to draft from, so its first round verifies an empty draft
  (llama.cpp logs ``decode: n_tokens == 0`` for the empty prefill and goes on);
* a draft is K = ``--spec-draft-n-max`` greedy top-1 tokens (a top-k 10 sampler, ``cur_p->data[0]``), cut
  short when the top token's probability (softmax over those 10) is under ``--spec-draft-p-min`` (default 0.0:
  never), then truncated to ``n_predict - generated - 1`` when that is positive (at 0 it is *not* truncated);
* counters: ``n_drafted`` sums the drafts' actual lengths, ``n_accept`` the accepted drafts, ``n_predict``
  every token the target emitted; the loop ends once ``n_predict`` *exceeds* ``-n`` or an end-of-generation
  token is emitted, so ``-n 64`` generates 65 tokens or more;
* target features: ``llama_set_embeddings_layer_inp(ctx_tgt, id)``, the input of layer ``id`` (vLLM's
  numbering); the drafter's recursion feeds back its pre-norm state; no fc_norm, no norm_output.

Same math as vLLM's drafter otherwise: each round is a fresh first pass over every verified row (llama.cpp
keeps KV and rewrites the deferred boundary row, which computes the same thing).

llama-server's loop (``tools/server/server-context.cpp``, the default: what users deploy) differs from
llama-speculative-simple's, read in the same release:

* the target evaluates the whole prompt and samples the first token from it (as vLLM does); the first draft is
  made from (that token, the features of the whole prompt);
* before each round the draft budget is ``n_draft_max = min(n_ctx - n_tokens - 2, n_remaining - 1)`` with
  ``n_remaining = n_predict - n_gen``: at 0 or less nothing is drafted and the target decodes one token plainly
  (no round, nothing counted); otherwise the drafter drafts K (``--spec-draft-n-max``, cut by p_min), a draft
  shorter than ``--spec-draft-n-min`` is dropped (then also a plain step), and what is left is truncated to
  ``n_draft_max`` (common_speculative_draft: n_min is checked *before* that truncation);
* counters (its ``/metrics`` spec_decode_*): ``n_draft_tokens`` sums the drafts after truncation,
  ``n_draft_verif_steps`` counts the rounds, ``n_draft_accepted`` and ``n_accepted_per_pos`` the accepted
  drafts; generation stops once ``n_gen`` reaches ``n_predict`` (exactly ``-n`` tokens) or at an
  end-of-generation token (the rest of that round's tokens is dropped; its acceptances still count).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines.llamacpp import EOG_TOKEN_TEXTS
from .report import accept_greedy

if TYPE_CHECKING:
    import torch

    from ..forward.protocols import TargetModel
    from ..forward.run import StepProgress
    from .drafter import EngineDrafter
    from .report import SimulateReport


@dataclass
class Round:
    """One verification round: the draft, how many were accepted, the tokens emitted, each draft step's top-2."""

    draft: list[int]
    accepted: int
    emitted: list[int]
    top2: list[tuple[int, float, int, float]] = field(default_factory=list)  # (id, p, id, p) per draft step


def eog_ids(target_dir: str | Path) -> set[int]:
    """The end-of-generation tokens llama.cpp's vocab loader marks (src/llama-vocab.cpp): eos/eot, and every
    token whose text is one of its known EOG texts."""
    d = Path(target_dir)
    out: set[int] = set()
    config = json.loads((d / "config.json").read_text())
    eos = config.get("eos_token_id")
    out |= set(eos) if isinstance(eos, list) else ({eos} if isinstance(eos, int) else set())
    tok = d / "tokenizer.json"
    if tok.is_file():
        data = json.loads(tok.read_text())
        vocab = (data.get("model") or {}).get("vocab") or {}
        for text in EOG_TOKEN_TEXTS:
            if isinstance(vocab, dict) and text in vocab:
                out.add(int(vocab[text]))
        for added in data.get("added_tokens") or []:
            if added.get("content") in EOG_TOKEN_TEXTS:
                out.add(int(added["id"]))
    return out


def draft_round(d: EngineDrafter, tokens: Sequence[int], aux: Any, k: int, p_min: float
                ) -> tuple[list[int], list[tuple[int, float, int, float]]]:
    """common_speculative_impl_draft_eagle3::draft: K greedy steps, stopping where top-10 softmax p < p_min."""
    import torch

    from ..forward.model import DraftInputs

    T = len(tokens) - 1
    result = d.model.draft(DraftInputs(torch.tensor([list(tokens)]), aux[:T].unsqueeze(0)), k)
    draft, top2 = [], []
    for step, logits in zip(result.tokens, result.logits):
        vals, idx = torch.topk(logits[0].float(), 10)
        p = torch.softmax(vals.double(), -1)
        top2.append((int(idx[0]), float(p[0]), int(idx[1]), float(p[1])))  # full-vocab logits: target ids
        if float(p[0]) < p_min:
            break
        draft.append(int(step[0]))
    return draft, top2


class _TargetFeatures:
    """The target for both of llama.cpp's loops: the greedy token after each of ``tokens`` (at positions start..)
    and their captured states.  eagleconv's runtime keeps its KV cache across rounds, as llama.cpp runs its target;
    the transformers runtime re-reads ``seq[:start]`` each time."""

    def __init__(self, tgt: TargetModel, d: EngineDrafter, ids: tuple[int, ...], capacity: int):
        from ..forward.kv_cache import SlotCache
        from ..forward.native_target import NativeTarget

        self.tgt, self.d, self.ids = tgt, d, ids
        self.native = tgt if isinstance(tgt, NativeTarget) else None
        self.cache = SlotCache(tgt.num_layers, capacity) if self.native is not None else None

    def __call__(self, seq: list[int], tokens: list[int], start: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if self.native is not None and self.cache is not None:
            from ..forward.kv_cache import Segment, target_step

            [(greedy, states)] = target_step(self.native, [Segment(self.cache, tokens, start)], self.ids)
            return greedy, states
        greedy, full = self.tgt.forward(seq[:start] + tokens, self.d.capture)
        return greedy[start:], torch.cat([full[i] for i in self.ids], -1)[start:]


def decode(tgt: TargetModel, d: EngineDrafter, ids: tuple[int, ...], prompt: list[int], K: int, n_predict: int,
           p_min: float, eog: set[int], tick: Callable[[int], None]) -> tuple[list[int], list[Round]]:
    """llama-speculative-simple's main loop for one prompt: (the emitted tokens, every round).  ``ids``: the
    target layers in the drafter's order (llama.cpp concatenates them in target_layers order, repeats kept)."""
    import torch

    target = _TargetFeatures(tgt, d, ids, len(prompt) + n_predict + 2 * K + 2)
    seq: list[int] = []
    _, aux = target(seq, prompt[:-1], 0) if len(prompt) > 1 else (None, None)
    seq = list(prompt)  # prompt_tgt + [id_last]
    out: list[int] = []
    rounds: list[Round] = []
    done = 0
    while True:
        n_draft_max = max(n_predict - done - 1, 0)
        # a one-token prompt leaves nothing to prefill: the drafter has no target features yet (eagle3's deferred
        # boundary is unset), so llama.cpp's first round verifies an empty draft ("accepted 0/0")
        draft, top2 = draft_round(d, seq, aux, K, p_min) if aux is not None else ([], [])
        if n_draft_max > 0:
            draft = draft[:n_draft_max]
        greedy, new_aux = target(seq, [seq[-1], *draft], len(seq) - 1)
        verified = [int(g) for g in greedy]
        emitted = verified[:accept_greedy(draft, verified) + 1]  # the accepted drafts and the target's own next token
        rounds.append(Round(draft, len(emitted) - 1, emitted, top2))
        done += len(emitted)
        eos = False
        for tok in emitted:
            out.append(tok)
            if tok in eog:
                eos = True
                break
        seq += emitted
        aux = torch.cat([aux, new_aux[:len(emitted)]]) if aux is not None else new_aux[:len(emitted)]
        tick(len(emitted))
        if done > n_predict or eos:
            return out, rounds


def decode_server(tgt: TargetModel, d: EngineDrafter, ids: tuple[int, ...], prompt: list[int], K: int, n_predict: int,
                  p_min: float, eog: set[int], tick: Callable[[int], None], n_min: int = 0,
                  n_ctx: int | None = None) -> tuple[list[int], list[Round]]:
    """llama-server's slot loop for one prompt (one slot, greedy): (the emitted tokens, every round).  ``n_ctx``:
    the slot's context (None: unbounded, as when prompt + n_predict fit with room to spare)."""
    import torch

    target = _TargetFeatures(tgt, d, ids, len(prompt) + n_predict + 2 * K + 2)
    seq: list[int] = []
    greedy, aux = target(seq, list(prompt), 0)  # the whole prompt, then its first token sampled
    out = [int(greedy[-1])]
    seq = [*prompt, out[0]]
    rounds: list[Round] = []
    tick(1)
    if out[0] in eog or n_predict <= 1:
        return out, rounds
    while True:
        n_remaining = n_predict - len(out)
        n_draft_max = n_remaining - 1
        if n_ctx is not None:
            n_draft_max = min(n_ctx - (len(seq) - 1) - 2, n_draft_max)
        draft: list[int] = []
        top2: list[tuple[int, float, int, float]] = []
        if n_draft_max > 0:
            draft, top2 = draft_round(d, seq, aux, K, p_min)
            if len(draft) < n_min:
                draft = []
            draft = draft[:n_draft_max]
        greedy, new_aux = target(seq, [seq[-1], *draft], len(seq) - 1)
        verified = [int(g) for g in greedy]
        emitted = verified[:accept_greedy(draft, verified) + 1]
        if draft:
            rounds.append(Round(draft, len(emitted) - 1, emitted, top2))
        stop = False
        for tok in emitted:
            out.append(tok)
            if tok in eog or len(out) >= n_predict:
                stop = True
                break
        seq += emitted
        aux = torch.cat([aux, new_aux[:len(emitted)]])
        tick(len(emitted))
        if stop:
            return out, rounds


LOOPS = ("server", "simple")  # llama-server (default), llama-speculative-simple


@dataclass(kw_only=True)
class Counters:
    """What llama-speculative-simple prints at the end: n_predict, n_drafted, n_accept."""

    n_predict: int
    n_drafted: int
    n_accept: int


def counters(rounds: Sequence[Round]) -> Counters:
    return Counters(n_predict=sum(len(r.emitted) for r in rounds), n_drafted=sum(len(r.draft) for r in rounds),
                    n_accept=sum(r.accepted for r in rounds))


def simulate_llamacpp(drafter: str | Path, target_dir: str | Path, tgt: TargetModel, prompts: list[list[int]], K: int,
                      n_predict: int, engine: str, p_min: float, progress: StepProgress, loop: str = "server"
                      ) -> SimulateReport:
    """Every prompt through llama-server's slot loop (``loop="server"``: ``n_predict`` per request,
    ``--spec-draft-n-max K --spec-draft-n-min 0``, greedy) or llama-speculative-simple's (``loop="simple"``:
    ``-n n_predict --spec-draft-n-max K --temp 0``)."""
    import math

    import torch

    from ..engines import resolve_engines
    from .drafter import engine_drafter
    from .report import SimulateError, SimulateReport

    if loop not in LOOPS:
        raise SimulateError(f"--llamacpp-loop {loop}: one of {', '.join(LOOPS)}", code=None)
    if not 0.0 <= p_min <= 1.0:
        raise SimulateError(f"--p-min {p_min}: a probability between 0 and 1", code=None)
    profile = resolve_engines([engine])[0]
    d = engine_drafter(drafter, engine, tgt, target_dir=target_dir)
    ids = d.layers
    progress("loading the target and the drafter", 2, 2)
    eog = eog_ids(target_dir)
    generating, planned, done = "generating tokens", len(prompts) * (n_predict + 1), [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(generating, min(done[0], planned), planned)

    tokens, drafts, generated, per_pos, all_rounds = [], [], [], [0] * K, []
    with torch.no_grad():
        for prompt in prompts:
            if loop == "server":
                out, rounds = decode_server(tgt, d, ids, prompt, K, n_predict, p_min, eog, tick)
                tokens.append(out)
                # the trailing [] is the step after the last round, which drafted nothing (as vLLM's reports end
                # with the proposal no round verified)
                drafts.append([*(r.draft for r in rounds), []])
                generated.append(len(out))
            else:
                out, rounds = decode(tgt, d, ids, prompt, K, n_predict, p_min, eog, tick)
                tokens.append(out)
                drafts.append([r.draft for r in rounds])
                generated.append(counters(rounds).n_predict)
            for r in rounds:
                for i in range(r.accepted):
                    per_pos[i] += 1
            all_rounds += rounds
    progress(generating, planned, planned)
    c = counters(all_rounds)
    with_drafts = sum(1 for r in all_rounds if r.draft)
    return SimulateReport(
        tokens=tokens, num_drafts=with_drafts, num_draft_tokens=c.n_drafted, num_accepted_tokens=c.n_accept,
        accepted_per_position=per_pos, acceptance_length=1 + c.n_accept / with_drafts if with_drafts else math.nan,
        drafts=drafts, engine=profile.label, num_speculative_tokens=K, max_tokens=n_predict,
        target_runtime=tgt.runtime, num_generated=generated,
        notes=[*d.notes, _count_note(loop, c, len(all_rounds), n_predict, eog),
               f"p_min {p_min} (llama.cpp's default 0.0: no early stop)"],
    )


def _count_note(loop: str, c: Counters, n_rounds: int, n_predict: int, eog: set[int]) -> str:
    if loop == "server":
        return (f"llama-server's loop (--llamacpp-loop server), counted as its /metrics: spec_decode_num_drafts "
                f"{n_rounds}, num_draft_tokens {c.n_drafted}, num_accepted_tokens {c.n_accept} (n_predict "
                f"{n_predict} tokens per request: the first sampled from the prompt, each draft cut to the budget "
                f"left minus one, none at the last; or up to an end-of-generation token {sorted(eog)})")
    return (f"llama-speculative-simple's loop (--llamacpp-loop simple), counted as it prints: n_drafted "
            f"{c.n_drafted}, n_accept {c.n_accept}, n_predict {c.n_predict} (-n {n_predict} ends once more than "
            f"{n_predict} tokens were emitted, or at an end-of-generation token {sorted(eog)})")
