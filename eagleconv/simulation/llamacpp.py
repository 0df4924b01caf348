"""``simulate --engine llama.cpp``: llama-server's and llama-speculative-simple's loops (llama.cpp b11434), as
policies of simulate's one decode loop (eagleconv.simulation.loop: cached, all prompts in lockstep).

What differs from vLLM's proposer (``eagleconv.simulation``), read in llama.cpp b11434's code
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

Same math as vLLM's drafter otherwise: each round computes what a fresh first pass over every verified row
computes (llama.cpp keeps KV and rewrites the deferred boundary row; simulate keeps the drafter's first-pass
cache, forward.kv_cache.DraftState, and runs only the newly verified rows).

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..engines.llamacpp import EOG_TOKEN_TEXTS
from .loop import Job, Request, Round, per_position, rounds_for
from .loop import decode as decode_all
from .report import accept_greedy

if TYPE_CHECKING:
    import torch

    from ..forward.protocols import TargetModel
    from .drafter import EngineDrafter
    from .report import SimulateReport


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


def cut_draft(tokens: Sequence[int], logits: Sequence[torch.Tensor], p_min: float
              ) -> tuple[list[int], list[tuple[int, float, int, float]]]:
    """common_speculative_impl_draft_eagle3::draft's early stop over a proposal: its K greedy steps up to the first
    whose top token's probability (softmax over the top 10) is under ``p_min``; and each step's top-2."""
    import torch

    draft, top2 = [], []
    for token, z in zip(tokens, logits):
        vals, idx = torch.topk(z.float(), 10)
        p = torch.softmax(vals.double(), -1)
        top2.append((int(idx[0]), float(p[0]), int(idx[1]), float(p[1])))  # full-vocab logits: target ids
        if float(p[0]) < p_min:
            break
        draft.append(token)
    return draft, top2


@dataclass
class ServerPolicy:
    """llama-server's slot loop (one slot per request, greedy): the prompt evaluated whole and its token sampled;
    a draft only while the budget ``n_draft_max`` is positive, dropped under ``n_min``, cut to the budget; a round
    counted only when it carried a draft; a request stops at ``n_predict`` tokens or an end-of-generation token.
    ``n_ctx``: the slot's context (None: unbounded, as when prompt + n_predict fit with room to spare)."""

    K: int
    n_predict: int
    p_min: float
    eog: set[int]
    tick: Callable[[int], None]
    n_min: int = 0
    n_ctx: int | None = None

    def prefill(self, r: Request) -> list[int]:
        return r.prompt

    def start(self, r: Request, first: int | None) -> None:
        assert first is not None
        r.out.append(first)
        r.seq.append(first)
        self.tick(1)
        r.done = first in self.eog or self.n_predict <= 1

    def _budget(self, r: Request) -> int:
        n_draft_max = self.n_predict - len(r.out) - 1  # n_remaining - 1
        if self.n_ctx is not None:
            n_draft_max = min(self.n_ctx - (len(r.seq) - 1) - 2, n_draft_max)
        return n_draft_max

    def proposes(self, r: Request) -> bool:
        return not r.done and self._budget(r) > 0  # else the target decodes one token plainly

    def proposed(self, r: Request, tokens: list[int], logits: Sequence[torch.Tensor]) -> None:
        draft, r.top2 = cut_draft(tokens, logits, self.p_min)
        r.draft = [] if len(draft) < self.n_min else draft[:self._budget(r)]  # n_min before the truncation

    def verified(self, r: Request, verified: list[int]) -> int:
        accepted = accept_greedy(r.draft, verified)
        emitted = verified[:accepted + 1]
        if r.draft:
            r.rounds.append(Round(r.draft, accepted, emitted, r.top2))
        for tok in emitted:
            r.out.append(tok)
            if tok in self.eog or len(r.out) >= self.n_predict:  # the rest of the round is dropped
                r.done = True
                break
        r.seq += emitted
        self.tick(len(emitted))
        return accepted


@dataclass
class SimplePolicy:
    """llama-speculative-simple's loop: the target evaluates ``prompt[:-1]`` and the first draft is made from
    (``prompt[-1]``, their features) before anything is sampled (a one-token prompt has no features: its first
    round verifies an empty draft); a draft is cut to ``n_predict - emitted - 1`` only while that is positive; every
    round counts; a request stops once more than ``n_predict`` tokens were emitted, or at an end-of-generation
    token."""

    K: int
    n_predict: int
    p_min: float
    eog: set[int]
    tick: Callable[[int], None]

    def prefill(self, r: Request) -> list[int]:
        return r.prompt[:-1]

    def start(self, r: Request, first: int | None) -> None:
        pass  # nothing sampled: seq is prompt_tgt + [id_last]

    def proposes(self, r: Request) -> bool:
        # a one-token prompt leaves nothing to prefill: the drafter has no target features yet (eagle3's deferred
        # boundary is unset), so llama.cpp's first round verifies an empty draft ("accepted 0/0")
        return not r.done and len(r.seq) > 1

    def proposed(self, r: Request, tokens: list[int], logits: Sequence[torch.Tensor]) -> None:
        draft, r.top2 = cut_draft(tokens, logits, self.p_min)
        n_draft_max = self.n_predict - emitted(r) - 1
        r.draft = draft[:n_draft_max] if n_draft_max > 0 else draft

    def verified(self, r: Request, verified: list[int]) -> int:
        accepted = accept_greedy(r.draft, verified)
        emitted_now = verified[:accepted + 1]  # the accepted drafts and the target's own next token
        r.rounds.append(Round(r.draft, accepted, emitted_now, r.top2))
        eos = False
        for tok in emitted_now:
            r.out.append(tok)
            if tok in self.eog:
                eos = True
                break
        r.seq += emitted_now
        self.tick(len(emitted_now))
        r.done = emitted(r) > self.n_predict or eos
        return accepted


def emitted(r: Request) -> int:
    """Every token the target emitted so far (llama-speculative-simple's n_predict counter)."""
    return sum(len(rd.emitted) for rd in r.rounds)


def run(tgt: TargetModel, d: EngineDrafter, prompts: Sequence[Sequence[int]], policy: ServerPolicy | SimplePolicy,
        kv_cache: bool = True) -> list[Request]:
    """Every prompt through one of llama.cpp's loops on simulate's decode loop (eagleconv.simulation.loop), the
    target's states in the drafter's order (``d.layers``: llama.cpp concatenates them in target_layers order)."""
    import torch

    reqs = [Request(list(p), list(p), policy.n_predict) for p in prompts]
    # the simple loop runs past n_predict by up to a round: K + 1 tokens, a round writing K + 1 rows after them
    capacity = max(len(p) for p in prompts) + policy.n_predict + 2 * policy.K + 2
    with torch.no_grad():
        decode_all(rounds_for(tgt, d, d.layers, reqs, capacity, kv_cache), reqs, policy)
    return reqs


def decode(tgt: TargetModel, d: EngineDrafter, prompt: list[int], K: int, n_predict: int, p_min: float,
           eog: set[int], tick: Callable[[int], None]) -> tuple[list[int], list[Round]]:
    """llama-speculative-simple's main loop for one prompt: (the emitted tokens, every round)."""
    [r] = run(tgt, d, [prompt], SimplePolicy(K, n_predict, p_min, eog, tick))
    return r.out, r.rounds


def decode_server(tgt: TargetModel, d: EngineDrafter, prompt: list[int], K: int, n_predict: int, p_min: float,
                  eog: set[int], tick: Callable[[int], None], n_min: int = 0, n_ctx: int | None = None
                  ) -> tuple[list[int], list[Round]]:
    """llama-server's slot loop for one prompt (one slot, greedy): (the emitted tokens, every round)."""
    [r] = run(tgt, d, [prompt], ServerPolicy(K, n_predict, p_min, eog, tick, n_min, n_ctx))
    return r.out, r.rounds


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


def simulate_loop(job: Job) -> SimulateReport:
    """Every prompt through llama-server's slot loop (``job.llamacpp_loop="server"``: ``n_predict`` per request,
    ``--spec-draft-n-max K --spec-draft-n-min 0``, greedy) or llama-speculative-simple's (``"simple"``:
    ``-n n_predict --spec-draft-n-max K --temp 0``), all prompts in lockstep on the cached path (each prompt's
    tokens and rounds are its own: the loops' decisions are per request); the loop llama.cpp's profile names
    (``decode_loop="llamacpp"``)."""
    import math

    from ..engines import resolve_engines
    from .drafter import engine_drafter
    from .report import SimulateError, SimulateReport

    drafter, target_dir, tgt, prompts, K, n_predict = job.drafter, job.target, job.tgt, job.prompts, job.K, job.max_tokens
    engine, p_min, progress, loop, kv_cache = job.engine, job.p_min, job.progress, job.llamacpp_loop, job.kv_cache
    if loop not in LOOPS:
        raise SimulateError(f"--llamacpp-loop {loop}: one of {', '.join(LOOPS)}", code=None)
    if not 0.0 <= p_min <= 1.0:
        raise SimulateError(f"--p-min {p_min}: a probability between 0 and 1", code=None)
    profile = resolve_engines([engine])[0]
    d = engine_drafter(drafter, engine, tgt, target_dir=target_dir)
    progress("loading the target and the drafter", 2, 2)
    eog = eog_ids(target_dir)
    generating, planned, done = "generating tokens", len(prompts) * (n_predict + 1), [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(generating, min(done[0], planned), planned)

    policy = (ServerPolicy if loop == "server" else SimplePolicy)(K, n_predict, p_min, eog, tick)
    reqs = run(tgt, d, prompts, policy, kv_cache)
    progress(generating, planned, planned)
    if loop == "server":
        # the trailing [] is the step after the last round, which drafted nothing (as vLLM's reports end with the
        # proposal no round verified)
        drafts = [[*(rd.draft for rd in r.rounds), []] for r in reqs]
        generated = [len(r.out) for r in reqs]
    else:
        drafts = [[rd.draft for rd in r.rounds] for r in reqs]
        generated = [emitted(r) for r in reqs]
    all_rounds = [rd for r in reqs for rd in r.rounds]
    c = counters(all_rounds)
    with_drafts = sum(1 for rd in all_rounds if rd.draft)
    return SimulateReport(
        tokens=[r.out for r in reqs], num_drafts=with_drafts, num_draft_tokens=c.n_drafted,
        num_accepted_tokens=c.n_accept, accepted_per_position=per_position(reqs, K),
        acceptance_length=1 + c.n_accept / with_drafts if with_drafts else math.nan,
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
