"""simulate's one decode loop, for every engine it models; what differs per engine is a :class:`Policy`.

The loop: the target prefills every prompt, then, step after step, the requests that draft propose in one batch
and every unfinished request is verified in one target pass.  What computes a step is a :class:`Rounds`:
:class:`Cached` (eagleconv's runtime: the target's and the drafter's keys and values kept across rounds, all
requests in one ragged pass, forward.kv_cache) or :class:`Rerun` (the plain definition: everything re-run each
round, prompt by prompt; the transformers runtime, and the reference the tests compare the cached path with).
What an engine decides is its policy's: which rows the prefill covers and whether its last token is sampled,
whether and how much a request drafts before a round, what a round emits, when a request stops, and how the
rounds are counted.  Each engine's loop is a module beside this one, named by its profile's ``decode_loop``
(vLLM's proposer: eagleconv.simulation.vllm; llama-server's and llama-speculative-simple's:
eagleconv.simulation.llamacpp), whose ``simulate_loop`` takes a :class:`Job`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol


if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from ..forward.native_target import NativeTarget
    from ..forward.protocols import TargetModel
    from ..forward.run import StepProgress
    from ..support.bounds import ModelDims
    from .drafter import EngineDrafter


@dataclass(frozen=True, kw_only=True)
class Job:
    """What simulate hands an engine's loop, once the target is loaded and the prompts checked against it."""

    drafter: str | Path
    target: str | Path  # the target's directory (what llama.cpp's checks read)
    tgt: TargetModel
    prompts: list[list[int]]
    source: Path | None  # the prompts' file, for the messages that name it
    K: int
    max_tokens: int
    engine: str  # as the user named it
    progress: StepProgress
    device: str = "cpu"
    kv_cache: bool = True
    dims: ModelDims | None = None  # the target's, from its config.json
    p_min: float = 0.0  # llama.cpp's --spec-draft-p-min
    llamacpp_loop: str = "server"  # llama.cpp's loops: llama-server's or llama-speculative-simple's


@dataclass
class Round:
    """One verification round: the draft, how many were accepted, the tokens emitted, each draft step's top-2."""

    draft: list[int]
    accepted: int
    emitted: list[int]
    top2: list[tuple[int, float, int, float]] = field(default_factory=list)  # (id, p, id, p) per draft step


@dataclass
class Request:
    """One prompt in flight: its verified tokens, its rounds, and the target's states the drafter is given next
    (the cached path: the rows it has not seen; the full re-run: all but the last)."""

    prompt: list[int]
    seq: list[int]  # every verified token: the rows the target holds, then the one it reads next
    limit: int  # the tokens it may emit (vLLM: max_tokens, capped at max_model_len; llama.cpp: n_predict)
    drafts: list[list[int]] = field(default_factory=list)  # the proposals as the report lists them
    rounds: list[Round] = field(default_factory=list)
    out: list[int] = field(default_factory=list)  # the tokens emitted (llama.cpp: up to its stop)
    done: bool = False
    draft: list[int] = field(default_factory=list)  # what the next round verifies after seq[-1]
    top2: list[tuple[int, float, int, float]] = field(default_factory=list)  # its steps' top-2
    aux: torch.Tensor | None = None


class Policy(Protocol):
    """What an engine decides in the loop (the loop calls these in this order)."""

    K: int

    def prefill(self, r: Request) -> list[int]: ...  # the rows the target prefills (none: nothing to prefill)

    def start(self, r: Request, first: int | None) -> None: ...  # first: the greedy token after the prefill's last row

    def proposes(self, r: Request) -> bool: ...  # whether r drafts before its next round

    def proposed(self, r: Request, tokens: list[int], logits: Sequence[torch.Tensor]) -> None: ...  # sets r.draft

    def verified(self, r: Request, verified: list[int]) -> int: ...  # the target's tokens after [last, *draft]: accepted


class Rounds(Protocol):
    """The target's and the drafter's side of the loop, with whatever caches they keep."""

    def prefill(self, reqs: list[Request], rows: list[list[int]]) -> list[int]: ...  # greedy after each last row

    def verify(self, reqs: list[Request]) -> list[list[int]]: ...  # the target's tokens after [seq[-1], *draft]

    def accepted(self, r: Request, accepted: int) -> None: ...  # after r.seq took the round's tokens

    def draft(self, reqs: list[Request], k: int) -> list[tuple[list[int], list[torch.Tensor]]]: ...  # tokens, logits


def decode(rounds: Rounds, reqs: list[Request], policy: Policy) -> None:
    """Prefill, then rounds until every request is done: the requests the policy lets draft propose (one batch),
    every unfinished one is verified (one target pass), and the policy takes what the target said."""
    pre = [(r, rows) for r in reqs if (rows := policy.prefill(r))]
    firsts = dict(zip((id(r) for r, _ in pre), rounds.prefill([r for r, _ in pre], [rows for _, rows in pre])
                      if pre else []))
    for r in reqs:
        policy.start(r, firsts.get(id(r)))
    while True:
        proposing = [r for r in reqs if policy.proposes(r)]
        if proposing:
            for r, (tokens, logits) in zip(proposing, rounds.draft(proposing, policy.K)):
                policy.proposed(r, tokens, logits)
        active = [r for r in reqs if not r.done]
        if not active:
            return
        for r, verified in zip(active, rounds.verify(active)):
            rounds.accepted(r, policy.verified(r, verified))
            r.draft, r.top2 = [], []


class Cached:
    """All prompts in lockstep, as vLLM's scheduler and llama-server's slots run them: one target pass per step
    over every unfinished prompt's rows (the prefill: every prompt row; then each prompt's [last token, drafts]),
    and one proposer batch, the keys and values of both kept across rounds (forward.kv_cache).  ``ids``: the
    target layers whose states the drafter reads, concatenated in that order."""

    def __init__(self, tgt: NativeTarget, d: EngineDrafter, ids: tuple[int, ...], reqs: list[Request], capacity: int):
        from ..forward.kv_cache import DraftState, SlotCache

        self.tgt, self.d, self.ids = tgt, d, ids
        caches = SlotCache.batch(tgt.num_layers, capacity, len(reqs))
        self.slots = {id(r): c for r, c in zip(reqs, caches)}
        self.states = {id(r): DraftState() for r in reqs}

    def _step(self, segments: list[tuple[Request, list[int], int, slice]]) -> list[list[int]]:
        from ..forward.kv_cache import Segment, target_step

        outs = target_step(self.tgt, [Segment(self.slots[id(r)], rows, start, pick) for r, rows, start, pick in segments],
                           self.ids)
        for (r, *_), (_, aux) in zip(segments, outs):
            r.aux = aux
        return [[int(g) for g in greedy] for greedy, _ in outs]

    def prefill(self, reqs: list[Request], rows: list[list[int]]) -> list[int]:
        return [greedy[-1] for greedy in self._step([(r, x, 0, slice(-1, None)) for r, x in zip(reqs, rows)])]

    def verify(self, reqs: list[Request]) -> list[list[int]]:
        return self._step([(r, [r.seq[-1], *r.draft], len(r.seq) - 1, slice(None)) for r in reqs])

    def accepted(self, r: Request, accepted: int) -> None:
        # the target's rows of the accepted tokens are the drafter's new first-pass rows; the rejected drafts'
        # slots (target and drafter) are written again next round
        assert r.aux is not None
        r.aux = r.aux[:accepted + 1]

    def draft(self, reqs: list[Request], k: int) -> list[tuple[list[int], list[torch.Tensor]]]:
        from ..forward.kv_cache import draft_batch

        toks, logits = draft_batch(self.d.model, [self.states[id(r)] for r in reqs], [r.seq for r in reqs],
                                   [r.aux for r in reqs if r.aux is not None], k)
        return [([int(t[i]) for t in toks], [z[i] for z in logits]) for i in range(len(reqs))]


class Rerun:
    """No cache: the target over the whole sequence and the drafter's first pass over every verified row each
    round, prompt by prompt: the plain definition, for the transformers runtime and as the cached path's reference."""

    def __init__(self, tgt: TargetModel, d: EngineDrafter, ids: tuple[int, ...]):
        self.tgt, self.d, self.ids = tgt, d, ids

    def _pass(self, r: Request, tokens: list[int]) -> list[int]:
        import torch

        greedy, states = self.tgt.forward(tokens, self.d.capture)
        r.aux = torch.cat([states[i] for i in self.ids], -1)
        return [int(g) for g in greedy]

    def prefill(self, reqs: list[Request], rows: list[list[int]]) -> list[int]:
        return [self._pass(r, x)[-1] for r, x in zip(reqs, rows)]

    def verify(self, reqs: list[Request]) -> list[list[int]]:
        return [self._pass(r, r.seq + r.draft)[len(r.seq) - 1:] for r in reqs]

    def accepted(self, r: Request, accepted: int) -> None:
        assert r.aux is not None
        r.aux = r.aux[:len(r.seq) - 1]

    def draft(self, reqs: list[Request], k: int) -> list[tuple[list[int], list[torch.Tensor]]]:
        import torch

        from ..forward.model import DraftInputs

        out = []
        for r in reqs:
            assert r.aux is not None
            T = len(r.seq) - 1
            result = self.d.model.draft(DraftInputs(torch.tensor([list(r.seq)]), r.aux[:T].unsqueeze(0)), k)
            out.append(([int(t[0]) for t in result.tokens], [z[0] for z in result.logits]))
        return out


def rounds_for(tgt: TargetModel, d: EngineDrafter, ids: tuple[int, ...], reqs: list[Request], capacity: int,
               kv_cache: bool) -> Rounds:
    """:class:`Cached` for eagleconv's runtime (unless ``kv_cache`` is off), else :class:`Rerun`.  ``capacity``: the
    furthest slot a round may write, so the caches are allocated once."""
    from ..forward.native_target import NativeTarget

    return Cached(tgt, d, ids, reqs, capacity) if kv_cache and isinstance(tgt, NativeTarget) else Rerun(tgt, d, ids)


def per_position(reqs: Sequence[Request], K: int) -> list[int]:
    """Entry i: the rounds whose first i+1 drafts were accepted (vllm:spec_decode_num_accepted_tokens_per_pos)."""
    out = [0] * K
    for r in reqs:
        for rd in r.rounds:
            for i in range(rd.accepted):
                out[i] += 1
    return out
