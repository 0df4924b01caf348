"""The report ``simulate`` writes (and ``measure`` writes in the same schema), its error, and the acceptance rule
both simulate loops (vLLM's and llama.cpp's) count with."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..errors import EagleconvError


class SimulateReport(BaseModel):
    """What ``eagleconv simulate --json`` prints; counters mean what vLLM's ``vllm:spec_decode_*`` mean."""

    model_config = ConfigDict(defer_build=True)

    tokens: list[list[int]] = Field(description="generated tokens per prompt (the target's greedy output)")
    num_drafts: int = Field(description="verification rounds that carried drafts (vllm:spec_decode_num_drafts)")
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int] = Field(description="K counts: entry i is draft position i+1 (the human output "
                                                     "numbers positions 1..K), the drafts whose first i+1 tokens were "
                                                     "accepted (vllm:spec_decode_num_accepted_tokens_per_pos)")
    acceptance_length: float | None = Field(description="1 + accepted / drafts, as vLLM's acceptance tests compute "
                                            "it; null when no round carried drafts (max_tokens 1: the prefill "
                                            "alone produced the output)")
    drafts: list[list[list[int]]] = Field(description="every proposal per prompt, K tokens each, including the "
                                                      "one made after the last round (vLLM drafts it too)")
    engine: str
    num_speculative_tokens: int
    max_tokens: int
    target_runtime: str = Field(description="what computed the target: 'eagleconv' (its own Llama/Qwen3/DeepSeek-V3 forward) "
                                            "or 'transformers'")
    notes: list[str] = Field(default_factory=list)
    num_generated: list[int] | None = Field(default=None, description="llama.cpp only: tokens the target emitted per "
                                            "prompt, as llama-speculative-simple's n_predict counts them")


class SimulateError(EagleconvError):
    """The engine would not run this drafter (it fails at load or in its first step); the message says why."""


def accept_greedy(drafts: list[int], verified: list[int], per_pos: list[int] | None = None) -> int:
    """vLLM's greedy rejection: the drafts accepted up to the first that differs from the target's own token;
    each accepted position is counted in ``per_pos``."""
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == verified[accepted]:
        if per_pos is not None:
            per_pos[accepted] += 1
        accepted += 1
    return accepted
