"""What ``eagleconv measure --json`` prints: simulate's counters (same names, same meaning), measured on a server."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MAX_TOKENS = 32  # simulate's and measure's --max-tokens alike, so --against compares like with like
POSITIONS = ("entry i is draft position i+1: positions are numbered 1..K in every output (the engines' Prometheus "
             "labels 0..K-1 are positions 1..K)")
AL_DEFINITION = ("acceptance_length = 1 + num_accepted_tokens / num_drafts: tokens per verification round, the bonus "
                 "token included, as vLLM's acceptance tests and simulate compute it")


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class PromptMeasure(_Model):
    """One prompt's request and the counters it moved (None where they cannot be attributed to it)."""

    tokens: list[int] = Field(description="generated token ids, as the server returned them")
    num_drafts: int | None = Field(None, description="verification rounds this request moved the counter by "
                                   "(null: not attributable with --concurrency > 1, or not reported by the server)")
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    accepted_per_position: list[int] | None = Field(None, description="accepted drafts per draft position; "
                                                    f"{POSITIONS} (null: not reported)")
    seconds: float = Field(description="wall time of the request, from sending it to its full reply")
    tokens_per_second: float = Field(description="this request's generated tokens / seconds (per-user throughput)")
    top2_margins: list[float | None] | None = Field(None, description="per generated token, the server's top-1 minus "
                                                    "top-2 logprob (requested with --against, to show greedy "
                                                    "near-ties; null where it gave fewer than two)")
    server_timings: dict[str, float] | None = Field(None, description="llama-server: the reply's own draft counts "
                                                    "(timings.draft_n, timings.draft_n_accepted)")


class Comparison(_Model):
    """``--against``: this run against a simulate or measure report, prompt by prompt."""

    against: str = Field(description="the report compared with")
    kind: str = Field(description="what it is: simulate or measure")
    same: bool = Field(description="every prompt's tokens and counters equal")
    first: str | None = Field(None, description="the first difference: prompt, round, position, what differs")
    prompt: int | None = None
    round: int | None = Field(None, description="the verification round of the first differing token (0 = the first "
                              "round after the prefill), where the reference report says where rounds start")
    position: int | None = Field(None, description="the draft position (1..K) of the first differing token in its "
                                 "round (K+1: the round's bonus token), or the draft position whose counter differs")
    margin: float | None = Field(None, description="the server's top-2 logprob margin at the first differing token")
    differences: list[str] = Field(default_factory=list, description="every prompt that differs, one line each")


class MeasureReport(_Model):
    """``eagleconv measure``: a served drafter's acceptance from the engine's own counters, in simulate's terms."""

    tokens: list[list[int]] = Field(description="generated tokens per prompt (greedy)")
    num_drafts: int | None = Field(description="verification rounds (vllm:spec_decode_num_drafts; llama-server: "
                                   "llamacpp:spec_decode_num_drafts_total; null: the server does not report them)")
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int] = Field(description=f"accepted drafts per draft position; {POSITIONS} "
                                             "(empty: not reported)")
    acceptance_length: float | None = Field(description="1 + accepted / drafts (null without num_drafts)")
    acceptance_length_definition: str = AL_DEFINITION
    conversion: str = Field(description="how the engine's counters became these fields")
    engine: str = Field(description="vllm or llama.cpp")
    engine_version: str | None = Field(None, description="as the server reports it, or --engine-build (notes say "
                                       "which); null where the server states no build (llama-server's build 0)")
    url: str
    model: str | None = Field(None, description="the model the server says it serves")
    num_speculative_tokens: int | None = Field(description="K: draft tokens per round: the number of per-position "
                                               "counters, else num_draft_tokens / num_drafts where that is whole "
                                               "(null: the server states neither)")
    max_tokens: int
    prompts_sha256: str = Field(description="sha256 of the prompts as compact JSON (json.dumps(prompts, "
                                "separators=(',', ':')))")
    concurrency: int
    seconds: float = Field(description="wall time of all requests")
    per_user_tokens_per_second: float = Field(description="mean over requests of tokens / request time")
    prompts: list[PromptMeasure]
    against: Comparison | None = None
    notes: list[str] = Field(default_factory=list)
