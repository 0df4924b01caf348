"""The parity runner (.ci/vllm_parity_runner.py) for MLA drafters: the same request and result, plus two things.

    python .ci/vllm_mla_runner.py REQUEST.json RESULT.json      (inside the vLLM virtualenv)

* vLLM's CPU rotary op is turned off (``compilation_config={"custom_ops": ["-rotary_embedding"]}``): it rotates the
  3-D ``q_pe`` that MLA passes wrongly (shared/reference/vllm-loader.md, "A CPU RoPE bug"); with it off vLLM equals
  transformers on a DeepSeek-V3 target.
* each result that loaded also says how vLLM held the drafter: ``draft`` = {"model_type", "architectures",
  "is_deepseek_mla", "use_mla"} from the draft ModelConfig, so a run shows whether the drafter was detected as MLA
  (vllm#45760) or rewritten into DeepSeek MTP.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_parity_runner as base

ROTARY_OFF = {"custom_ops": ["-rotary_embedding"]}


def main(request_path: str, result_path: str) -> int:
    import vllm

    held: dict = {}
    engine_llm = vllm.LLM

    class LLM(engine_llm):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("compilation_config", ROTARY_OFF)
            super().__init__(*args, **kwargs)
            draft = self.llm_engine.vllm_config.speculative_config.draft_model_config
            inner = getattr(draft.hf_config, "model", None)  # EAGLEConfig wraps the drafter's own config
            held.update(model_type=getattr(inner, "model_type", draft.hf_config.model_type),
                        architectures=list(draft.architectures),
                        is_deepseek_mla=bool(draft.is_deepseek_mla), use_mla=bool(draft.use_mla))

    vllm.LLM = LLM
    run_case = base.run_case

    def run_and_describe(request: dict, drafter: str, case: dict | None = None) -> dict:
        held.clear()
        result = run_case(request, drafter, case)
        return {**result, "draft": dict(held)}

    base.run_case = run_and_describe
    return base.main(request_path, result_path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
