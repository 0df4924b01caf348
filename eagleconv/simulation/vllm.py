"""``simulate --engine vllm``: vLLM's proposer (vllm/v1/spec_decode/llm_base_proposer.py), as a policy of
simulate's one decode loop (eagleconv.simulation.loop), the loop vLLM's profiles name (``decode_loop="vllm"``).

The drafter runs as the engine profile reads it (flags as the profile resolves them, aux layers as vLLM's V1
runner captures them, tensors as its loader renames, drops, defaults or shares them), through eagleconv's
reference forward (``eagleconv.forward``: vLLM's drafter math, every architecture it registers) over the
engine's view of the checkpoint (``engines.view``):

* prefill: the target samples x_P; the drafter's first pass sees row p = (token x_{p+1}, position p, hidden
  combine(aux_p)) for every prompt position, the last row carrying the sampled token;
* each draft step k >= 2 feeds back the previous step's pre-norm state (post-norm with norm_output), one row at
  position T-2+k, attending to the first pass's rows and the earlier steps of this round;
* verification: the target scores [last token, d_1..d_K]; the longest prefix equal to its greedy tokens is
  accepted, plus one bonus token; rejected drafts leave nothing behind (their KV slots are overwritten before
  anything reads them), so every round is equivalent to a fresh first pass over all verified rows;
* counters as vLLM's: every verification round is one draft of K tokens (including the last round, whose
  tokens past max_tokens are cut), ignore_eos.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .loop import Job, Request, Round, per_position, rounds_for
from .loop import decode as decode_all
from .report import SimulateReport, accept_greedy

if TYPE_CHECKING:
    import torch

    from ..support.bounds import ModelDims
    from .drafter import EngineDrafter


def propose(d: EngineDrafter, tokens: Sequence[int], aux: torch.Tensor, k: int) -> list[int]:
    """One round of vLLM's proposer: a first pass over every verified row, then k-1 recursive steps.

    ``tokens``: every verified token (prompt + output); ``aux``: the target's captured states for all but the last.
    """
    import torch

    from ..forward.model import DraftInputs

    T = len(tokens) - 1
    result = d.model.draft(DraftInputs(torch.tensor([list(tokens)]), aux[:T].unsqueeze(0)), k)
    return [int(t[0]) for t in result.tokens]


class VllmPolicy:
    """vLLM's proposer: the prefill samples the first token; every request proposes K after the prefill and after
    each of its rounds, the last included (that proposal is never verified); a round emits the accepted drafts and
    the target's next token; a request stops at its limit (ignore_eos)."""

    def __init__(self, K: int, tick: Callable[[int], None]):
        self.K, self.tick = K, tick

    def prefill(self, r: Request) -> list[int]:
        return r.prompt

    def start(self, r: Request, first: int | None) -> None:
        assert first is not None
        r.seq.append(first)
        r.out.append(first)
        r.done = len(r.out) >= r.limit
        self.tick(1)

    def proposes(self, r: Request) -> bool:
        return len(r.drafts) == len(r.rounds)  # once after the prefill and after each round

    def proposed(self, r: Request, tokens: list[int], logits: Sequence[torch.Tensor]) -> None:
        r.draft = tokens
        r.drafts.append(tokens)

    def verified(self, r: Request, verified: list[int]) -> int:
        accepted = accept_greedy(r.draft, verified[:self.K])
        emitted = [*r.draft[:accepted], verified[accepted]]
        r.rounds.append(Round(r.draft, accepted, emitted))
        self.tick(min(len(emitted), r.limit - len(r.out)))
        r.seq += emitted
        r.out += emitted
        r.done = len(r.out) >= r.limit
        return accepted


def limits(prompts: list[list[int]], max_tokens: int, dims: ModelDims | None) -> tuple[list[int], list[str]]:
    """Each prompt's output length: max_tokens, or fewer where prompt + output would pass the target's
    max_position_embeddings (vLLM's max_model_len: its scheduler stops the request there, FINISHED_LENGTH_CAPPED;
    check_decode has refused a prompt that leaves no room)."""
    room = dims.max_positions if dims is not None and dims.max_positions else None
    out = [max_tokens if room is None else min(max_tokens, room - len(p)) for p in prompts]
    capped = [f"prompt {i}: stopped after {n} tokens at max_model_len {room} (the target's max_position_embeddings), "
              "as vLLM stops it" for i, n in enumerate(out) if n < max_tokens]
    if capped:
        capped.append("the counters of rounds near max_model_len are not vLLM's: it truncates drafts that would pass "
                      "max_model_len and skips drafting for the whole batch once a sequence + K passes it (the "
                      "tokens are: the vLLM parity tier's max_model_len case)")
    return out, capped


def simulate_loop(job: Job) -> SimulateReport:
    """Every prompt through vLLM's proposer and verification, all prompts in one batch (the cached path)."""
    import torch

    from ..support.bounds import ModelDims, check_decode
    from ..forward.weights import PACK_MIN_BYTES
    from . import drafter

    tgt, prompts, progress, dims = job.tgt, job.prompts, job.progress, job.dims
    d = drafter.engine_drafter(job.drafter, job.engine, tgt, job.device)
    spec = d.model.spec
    if dims is not None and spec.head_dim is not None:  # the drafter's own KV cache (MLA's is smaller than this)
        check_decode(dims, ModelDims(str(job.drafter), spec.num_hidden_layers, spec.num_key_value_heads or
                                     spec.num_attention_heads, spec.head_dim, spec.draft_vocab_size, spec.hidden_size,
                                     spec.max_position_embeddings), prompts, job.max_tokens, job.K, job.source)
    progress("loading the target and the drafter", 2, 2)
    lengths, capped = limits(prompts, job.max_tokens, dims)
    generating, planned = "generating tokens", sum(lengths)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(generating, done[0], planned)

    progress(generating, 0, planned)
    K = job.K
    reqs = [Request(list(p), list(p), n) for p, n in zip(prompts, lengths)]
    # a round writes K+1 rows from the last verified position, which is before len(prompt) + max_tokens
    rounds = rounds_for(tgt, d, d.capture, reqs, max(len(r.prompt) + r.limit for r in reqs) + K, job.kv_cache)
    with torch.no_grad():
        decode_all(rounds, reqs, VllmPolicy(K, tick))
    progress(generating, planned, planned)
    num_drafts = sum(len(r.rounds) for r in reqs)
    accepted_total = sum(rd.accepted for r in reqs for rd in r.rounds)
    n_target, n_drafter = tgt.packed_weights, d.model.packed_weights
    packed = (f"linears of {n_target} target and {n_drafter} drafter weights (those of {PACK_MIN_BYTES >> 20} MiB or "
              "more): oneDNN, each reordered once, as vLLM's CPU backend runs them")
    return SimulateReport(
        tokens=[r.out[:r.limit] for r in reqs], num_drafts=num_drafts, num_draft_tokens=num_drafts * K,
        num_accepted_tokens=accepted_total, accepted_per_position=per_position(reqs, K),
        acceptance_length=1 + accepted_total / num_drafts if num_drafts else None,
        drafts=[r.drafts for r in reqs], engine=job.engine, num_speculative_tokens=K, max_tokens=job.max_tokens,
        target_runtime=tgt.runtime,
        notes=[*d.notes, *capped, "aux layers captured as vLLM's V1 runner does: " + str(list(d.capture)),
               *([packed] if n_target + n_drafter else []),
               *([f"target run by transformers: {tgt.fallback}"] if tgt.fallback else [])],
    )
