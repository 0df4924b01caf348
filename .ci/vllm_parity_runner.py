"""Run EAGLE-3 speculative decoding in real vLLM (CPU build) and record what it did, as JSON.

Runs inside the vLLM virtualenv (.ci/vllm-env), not eagleconv's environment:

    python .ci/vllm_parity_runner.py REQUEST.json RESULT.json

REQUEST: {"target": DIR, "prompts": [[ids]...], "num_speculative_tokens": K, "max_tokens": N,
          "cases": [{"name": str, "drafter": DIR}, ...]}
          A case may override "target" and "prompts", and set "max_model_len": null to let vLLM derive it from the
          target's max_position_embeddings (default 512, the tiny pair's).
RESULT:  {"vllm": version, "cases": {name: {"status": "ok" | "error", "error": str, "seconds": float,
          "tokens": [[ids] per prompt], "drafts": [[[K ids] per round] per prompt],
          "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position": [K]}}}

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so a load error is a Python exception here and
the V1 runner's ``propose_draft_token_ids`` can be wrapped to capture every drafted token.  Each case writes its
result as soon as it finishes; the caller (.ci/vllm_parity.py) owns the timer and restarts this script after a hang.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # the V1 runner: Triton (V2's kernels) has no CPU backend
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _install_draft_capture() -> dict[str, list[list[int]]]:
    """Wrap GPUModelRunner.propose_draft_token_ids: every call's drafts, keyed by the runner's request id."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    captured: dict[str, list[list[int]]] = {}
    original = GPUModelRunner.propose_draft_token_ids
    if getattr(original, "_eagleconv_capture", False):
        return original._eagleconv_store  # type: ignore[attr-defined]

    def wrapper(self, scheduler_output, *args, **kwargs):
        drafts = original(self, scheduler_output, *args, **kwargs)
        rows = drafts.tolist() if hasattr(drafts, "tolist") else [list(r) for r in drafts]
        for req_id, row in zip(self.input_batch.req_ids, rows):
            if req_id is not None:
                captured.setdefault(req_id, []).append([int(t) for t in row])
        return drafts

    wrapper._eagleconv_capture = True  # type: ignore[attr-defined]
    wrapper._eagleconv_store = captured  # type: ignore[attr-defined]
    GPUModelRunner.propose_draft_token_ids = wrapper
    return captured


def _metric(metrics, name: str):
    for m in metrics:
        if m.name == name:
            return m
    return None


def run_case(request: dict, drafter: str, case: dict | None = None) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    captured = _install_draft_capture()
    captured.clear()
    K = int(request["num_speculative_tokens"])
    case = case or {}
    request = {**request, **{k: case[k] for k in ("target", "prompts") if k in case}}
    # "rotary_op": false (the MLA cases) runs vLLM with its CPU rotary custom op off: it rotates 3-D q_pe wrongly
    extra = {} if case.get("rotary_op", True) else {"compilation_config": {"custom_ops": ["-rotary_embedding"]}}
    llm = LLM(model=request["target"], skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
              max_model_len=case.get("max_model_len", 512), disable_log_stats=False, seed=0,
              speculative_config={"model": drafter, "method": "eagle3", "num_speculative_tokens": K}, **extra)
    try:
        prompts = [TokensPrompt(prompt_token_ids=p) for p in request["prompts"]]
        params = SamplingParams(temperature=0, max_tokens=int(request["max_tokens"]), ignore_eos=True)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        metrics = llm.get_metrics()
        per_pos = _metric(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos")

        def counter(name: str) -> int:
            m = _metric(metrics, name)
            return int(m.value) if m is not None else 0

        drafts = []
        for out in outputs:  # the runner's request id is the engine's, which may carry a suffix
            keys = [k for k in captured if k == out.request_id or k.startswith(out.request_id + "-")
                    or out.request_id.startswith(k + "-")]
            drafts.append([d for k in keys for d in captured[k]])
        return {
            "status": "ok",
            "tokens": [list(o.outputs[0].token_ids) for o in outputs],
            "drafts": drafts,
            "num_drafts": counter("vllm:spec_decode_num_drafts"),
            "num_draft_tokens": counter("vllm:spec_decode_num_draft_tokens"),
            "num_accepted_tokens": counter("vllm:spec_decode_num_accepted_tokens"),
            "accepted_per_position": [int(v) for v in per_pos.values] if per_pos is not None else [],
        }
    finally:
        del llm
        gc.collect()


def main(request_path: str, result_path: str) -> int:
    import vllm

    with open(request_path) as f:
        request = json.load(f)
    results: dict = {"vllm": vllm.__version__, "cases": {}}
    if os.path.exists(result_path):  # a restart after a hang: keep what earlier runs recorded
        with open(result_path) as f:
            results = json.load(f)
    for case in request["cases"]:
        if case["name"] in results["cases"]:
            continue
        # Mark the case first: if it hangs and the caller kills us, the mark says which one did.
        results["cases"][case["name"]] = {"status": "running"}
        _write(result_path, results)
        start = time.perf_counter()
        try:
            result = run_case(request, case["drafter"], case)
        except BaseException as exc:  # noqa: BLE001 - vLLM raises anything from ValueError to AssertionError
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}".strip(),
                      "traceback": traceback.format_exc()[-4000:]}
        result["seconds"] = round(time.perf_counter() - start, 2)
        results["cases"][case["name"]] = result
        _write(result_path, results)
        print(f"[vllm-parity] {case['name']}: {result['status']} ({result['seconds']} s)", file=sys.stderr, flush=True)
    return 0


def _write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
