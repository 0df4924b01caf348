"""``eagleconv simulate``: greedy speculative decoding offline, counted the way vLLM counts it.

The target runs in transformers, or (``--target-runtime auto``, the default, for a Llama or Qwen3 target whose every
config field and tensor eagleconv understands) in eagleconv's own forward of the same math, checked against
transformers and vLLM; the drafter runs as the engine profile reads it (flags as the profile resolves
them, aux layers as vLLM's V1 runner captures them, tensors as its loader renames, drops, defaults or shares
them), through eagleconv's reference forward (``eagleconv.forward``: vLLM's drafter math, every architecture
it registers) over the engine's view of the checkpoint (``engines.view``), with vLLM's proposer semantics
(vllm/v1/spec_decode/llm_base_proposer.py):

* prefill: the target samples x_P; the drafter's first pass sees row p = (token x_{p+1}, position p, hidden
  combine(aux_p)) for every prompt position, the last row carrying the sampled token;
* each draft step k >= 2 feeds back the previous step's pre-norm state (post-norm with norm_output), one row at
  position T-2+k, attending to the first pass's rows and the earlier steps of this round;
* verification: the target scores [last token, d_1..d_K]; the longest prefix equal to its greedy tokens is
  accepted, plus one bonus token; rejected drafts leave nothing behind (their KV slots are overwritten before
  anything reads them), so every round is equivalent to a fresh first pass over all verified rows;
* counters as vLLM's: every verification round is one draft of K tokens (including the last round, whose
  tokens past max_tokens are cut), ignore_eos.

The generated tokens are the target's plain greedy output whatever the drafter does; only the counters and the
drafted tokens depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .drafter import EngineDrafter, engine_drafter
from .loop import Request, VllmPolicy, decode, per_position, rounds_for
from .report import SimulateError, SimulateReport, accept_greedy

if TYPE_CHECKING:
    import torch

    from ..support.bounds import ModelDims
    from ..forward.protocols import TargetModel
    from ..forward.run import StepProgress

DEFAULT_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 17, 42, 99, 7, 300), (1, 5, 5, 64, 128), (1, 250, 3, 77, 31, 2, 9),
                                                (1, 400, 401, 402))


def propose(d: EngineDrafter, tokens: Sequence[int], aux: torch.Tensor, k: int) -> list[int]:
    """One round of vLLM's proposer: a first pass over every verified row, then k-1 recursive steps.

    ``tokens``: every verified token (prompt + output); ``aux``: the target's captured states for all but the last.
    """
    import torch

    from ..forward.model import DraftInputs

    T = len(tokens) - 1
    result = d.model.draft(DraftInputs(torch.tensor([list(tokens)]), aux[:T].unsqueeze(0)), k)
    return [int(t[0]) for t in result.tokens]


def _target(target: str | Path, runtime: str) -> TargetModel:
    from ..forward.native_target import open_target

    path = Path(target)
    if not (path / "config.json").is_file():
        raise SimulateError(f"{path}: no config.json (--target takes a Hugging Face model directory)", code=None)
    return open_target(path, runtime)


def available_threads() -> int:
    """The cores this process may run on (its CPU affinity, as a container or ``taskset`` limits it): --threads' cap."""
    from ..support._process import usable_cores

    return usable_cores()


def simulate(drafter: str | Path, target: str | Path, prompts: Sequence[Sequence[int]] | str | Path | None = None,
             *, num_speculative_tokens: int = 3, max_tokens: int = 32, engine: str = "vllm:0.32",
             target_runtime: str = "auto", progress: StepProgress | None = None, threads: int | None = None,
             device: str = "cpu", kv_cache: bool = True, p_min: float = 0.0,
             llamacpp_loop: str = "server") -> SimulateReport:
    """Greedy speculative decoding of ``prompts`` with ``target`` verifying ``drafter``'s proposals, as vLLM runs it.

    ``prompts``: token-id lists, a JSON file of them (read by ``forward.inputs.read_prompts``, as every
    ``--prompts`` is), or None for four built-in ones; either way checked by the same rules, the vocabulary
    once the target is loaded.  ``target_runtime``: ``auto`` runs a Llama/Qwen3 target through eagleconv's own
    forward when it understands every config field and tensor (no transformers import: most of simulate's time
    otherwise), else transformers; ``transformers`` or ``eagleconv`` force one (forward.native_target.open_target).
    ``progress(what, done, total)``: told of the loading, then of the tokens generated of all prompts' max_tokens.
    ``threads``: torch's intra-op threads, 1 to the cores this process may use (default: those cores that other
    processes leave idle, measured while torch loads: _process.default_threads).  ``device``: where the
    target and drafter run (``cuda`` needs eagleconv's runtime and a CUDA device).  ``kv_cache`` (eagleconv's
    runtime only, either engine): keys and values kept across rounds and all prompts verified in one pass per
    step (forward.kv_cache); False re-runs everything each round, prompt by prompt (the reference the tests
    compare it with; the transformers runtime always runs that way).  ``p_min`` (``--engine llama.cpp`` only):
    llama.cpp's ``--spec-draft-p-min`` early stop (eagleconv.simulate.llamacpp).  ``llamacpp_loop``
    (``--engine llama.cpp`` only): ``server``, llama-server's slot loop (what is deployed), or ``simple``,
    llama-speculative-simple's (the parity tier's reference); their differences: eagleconv.simulate.llamacpp.
    """
    from ..support import _process
    from ..support._extras import need

    if threads is not None and not 1 <= threads <= available_threads():
        raise SimulateError(f"--threads {threads}: give 1 to {available_threads()} (the CPUs this process may use; "
                            "more threads than CPUs only wait for each other)", code=None)
    before_import = _process.cpu_sample()  # the window for others' CPU use: torch's import, reading the prompts
    need("torch", "simulate")
    import torch

    from ..forward.inputs import check_prompts, read_prompts

    if num_speculative_tokens < 1 or max_tokens < 1:
        raise SimulateError("--num-speculative-tokens and --max-tokens must be at least 1", code=None)
    from ..support.bounds import check_decode_arguments

    check_decode_arguments(max_tokens, num_speculative_tokens)
    if device != "cpu":
        if not device.startswith("cuda"):
            raise SimulateError(f"--device {device}: simulate runs on cpu or cuda", code=None)
        if not torch.cuda.is_available():
            raise SimulateError(f"--device {device}: torch {torch.__version__} sees no CUDA device here", code=None)
        if target_runtime == "transformers":
            raise SimulateError(f"--device {device} runs the target in eagleconv's runtime, not transformers",
                                code=None)
    source = Path(prompts) if isinstance(prompts, str | Path) else None
    given = read_prompts(source) if source is not None else check_prompts(
        prompts if prompts is not None else DEFAULT_PROMPTS)  # before the target loads: a bad file fails at once
    before, note = torch.get_num_threads(), None
    if threads is None:
        threads, others = _process.default_threads(before_import)
        if threads < available_threads() and others is not None:
            note = (f"{threads} of {available_threads()} CPU threads: other processes kept {others:.1f} cores busy "
                    "while torch loaded (--threads N to choose)")
    torch.set_num_threads(threads)
    try:
        report = _simulate(drafter, target, given, source, num_speculative_tokens, max_tokens, engine,
                           "eagleconv" if device != "cpu" else target_runtime,
                           progress or (lambda what, done, total: None), device, kv_cache, p_min, llamacpp_loop)
    finally:
        torch.set_num_threads(before)
    if note is not None:
        report.notes.append(note)
    return report


def _limits(prompts: list[list[int]], max_tokens: int, dims: ModelDims | None) -> tuple[list[int], list[str]]:
    """Each prompt's output length: max_tokens, or fewer where prompt + output would pass the target's
    max_position_embeddings (vLLM's max_model_len: its scheduler stops the request there, FINISHED_LENGTH_CAPPED;
    check_decode has refused a prompt that leaves no room)."""
    room = dims.max_positions if dims is not None and dims.max_positions else None
    limits = [max_tokens if room is None else min(max_tokens, room - len(p)) for p in prompts]
    capped = [f"prompt {i}: stopped after {n} tokens at max_model_len {room} (the target's max_position_embeddings), "
              "as vLLM stops it" for i, n in enumerate(limits) if n < max_tokens]
    if capped:
        capped.append("the counters of rounds near max_model_len are not vLLM's: it truncates drafts that would pass "
                      "max_model_len and skips drafting for the whole batch once a sequence + K passes it (the "
                      "tokens are: the vLLM parity tier's max_model_len case)")
    return limits, capped


def _simulate(drafter: str | Path, target: str | Path, prompts: list[list[int]], source: Path | None,
              num_speculative_tokens: int, max_tokens: int, engine: str, target_runtime: str,
              progress: StepProgress, device: str = "cpu", kv_cache: bool = True, p_min: float = 0.0,
              llamacpp_loop: str = "server") -> SimulateReport:
    import torch

    from ..support.bounds import ModelDims, check_decode
    from ..engines import resolve_engines
    from ..forward.inputs import check_prompts
    from ..forward.weights import PACK_MIN_BYTES
    from ..config.target import target_dims

    progress("loading the target and the drafter", 0, 2)
    dims = target_dims(target) if (Path(target) / "config.json").is_file() else None
    if dims is not None:  # everything a config and the arguments make simulate allocate, before it does
        check_decode(dims, None, prompts, max_tokens, num_speculative_tokens, source)
    tgt = _target(target, target_runtime)
    if device != "cpu":
        from ..forward.native_target import NativeTarget

        assert isinstance(tgt, NativeTarget), "--device other than cpu opens eagleconv's runtime"
        tgt.to(device)
    tgt.pack_linears()  # on the CPU: weights reordered once for oneDNN, as vLLM runs its linears
    prompts = check_prompts(prompts, source, tgt.vocab_size)
    progress("loading the target and the drafter", 1, 2)
    if resolve_engines([engine])[0].engine == "llama.cpp":  # the same loop, llama.cpp's policy
        from .llamacpp import simulate_llamacpp
        return simulate_llamacpp(drafter, target, tgt, prompts, num_speculative_tokens, max_tokens, engine, p_min,
                                 progress, loop=llamacpp_loop, kv_cache=kv_cache)
    d = engine_drafter(drafter, engine, tgt, device)
    spec = d.model.spec
    if dims is not None and spec.head_dim is not None:  # the drafter's own KV cache (MLA's is smaller than this)
        check_decode(dims, ModelDims(str(drafter), spec.num_hidden_layers, spec.num_key_value_heads or
                                     spec.num_attention_heads, spec.head_dim, spec.draft_vocab_size, spec.hidden_size,
                                     spec.max_position_embeddings), prompts, max_tokens, num_speculative_tokens, source)
    progress("loading the target and the drafter", 2, 2)
    limits, capped = _limits(prompts, max_tokens, dims)
    generating, planned = "generating tokens", sum(limits)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(generating, done[0], planned)

    progress(generating, 0, planned)
    K = num_speculative_tokens
    reqs = [Request(list(p), list(p), n) for p, n in zip(prompts, limits)]
    # a round writes K+1 rows from the last verified position, which is before len(prompt) + max_tokens
    rounds = rounds_for(tgt, d, d.capture, reqs, max(len(r.prompt) + r.limit for r in reqs) + K, kv_cache)
    with torch.no_grad():
        decode(rounds, reqs, VllmPolicy(K, tick))
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
        drafts=[r.drafts for r in reqs], engine=engine, num_speculative_tokens=K, max_tokens=max_tokens,
        target_runtime=tgt.runtime,
        notes=[*d.notes, *capped, "aux layers captured as vLLM's V1 runner does: " + str(list(d.capture)),
               *([packed] if n_target + n_drafter else []),
               *([f"target run by transformers: {tgt.fallback}"] if tgt.fallback else [])],
    )


__all__ = ["DEFAULT_PROMPTS", "EngineDrafter", "SimulateError", "SimulateReport", "accept_greedy", "available_threads",
           "engine_drafter", "propose", "simulate"]
