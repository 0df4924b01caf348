"""Every non-Llama architecture eagleconv writes for vLLM, run in real vLLM 0.32 (issue 32, deliverable 5).

    python .ci/vllm_written_archs.py --vllm-python VENV/bin/python [--work DIR] [--record]
    .ci/vllm-parity --written-archs [--work DIR]      (CI: the same, live, against the record)

For Phi-3 and Qwen3: a seeded random tiny target (transformers; hidden 256, 4 layers, vocab 512), a synthetic
TorchSpec-layout drafter (EAGLE-3.1), converted with ``eagleconv convert --to vllm``; vLLM must load what eagleconv
wrote and draft exactly what ``simulate`` drafts (tokens, counters, every drafted token).  ``--record`` writes
fixtures/mla-variants/written-archs-vllm-0.32.0.json (read by tests/engines/test_vllm_mla.py).  Without it (CI),
vLLM's architectures, projections and counters must also equal that record: a difference means the record is stale.
Both cases run in one runner process (vLLM imported once): ~35 s on the idle 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / ".ci"))

from vllm_mla_verdicts import K, MAX_TOKENS, PROMPTS  # noqa: E402
from vllm_parity import compare, run_vllm, simulate_case  # noqa: E402

from eagleconv.validation.parity_mla import MLA_VARIANTS_DIR  # noqa: E402
from eagleconv.synthetic import DrafterRecipe, TinyDims, make_drafter  # noqa: E402

RECORD = MLA_VARIANTS_DIR / "written-archs-vllm-0.32.0.json"
DIMS = TinyDims(hidden=256, target_hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=512,
                draft_vocab=256, aux_ids=(1, 2, 3), target_layers=4)
COMMON: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                          "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                          "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def build_target(arch: str, out: Path) -> Path:
    import torch
    import transformers

    config = {"phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
              "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 64})}[arch]
    torch.manual_seed(0)
    model = getattr(transformers, config[1])(getattr(transformers, config[0])(**COMMON, **config[2]))
    model.save_pretrained(out, safe_serialization=True)
    return out


def tensor_names(directory: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        return list(f.keys())


def stale(case: dict, record: dict | None) -> list[str]:
    """What a live run shows that the record does not (empty with ``--record``, which writes it)."""
    if record is None:
        return []
    return [f"{case['name']}: {key} {case[key]} live, {record.get(key)} recorded in {RECORD.name} (re-run --record)"
            for key in ("architectures", "projections", "vllm") if case[key] != record.get(key)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-vllm-archs-"))
    work.mkdir(parents=True, exist_ok=True)
    from eagleconv import convert

    cases = []
    for arch in ("phi3", "qwen3"):
        target = build_target(arch, work / f"{arch}-target")
        src = make_drafter(work / f"{arch}-torchspec", DrafterRecipe(producer="torchspec", architecture=arch,
                                                                     eagle31=True, dims=DIMS, dtype="float32"))
        out = work / f"{arch}-eagle3-vllm"
        report = convert(src, out, "vllm", overwrite=True)
        assert report.ok, report.findings
        written = json.loads((out / "config.json").read_text())
        cases.append({"name": f"{arch}: convert --to vllm of a TorchSpec EAGLE-3.1 drafter", "drafter": str(out),
                      "target": str(target), "architectures": written["architectures"],
                      "projections": sorted({n.split(".")[-2] for n in tensor_names(out) if n.endswith("_proj.weight")})})
    results = run_vllm(args.vllm_python, {"target": cases[0]["target"], "prompts": PROMPTS, "num_speculative_tokens": K,
                                          "max_tokens": MAX_TOKENS, "cases": [{k: c[k] for k in ("name", "drafter",
                                                                                              "target")} for c in cases]},
                       work, 600.0)
    problems = []
    recorded = {} if args.record else json.loads(RECORD.read_text())["cases"]
    for c in cases:
        r = results["cases"][c["name"]]
        c["vllm"] = {k: r.get(k) for k in ("status", "error", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                           "accepted_per_position") if r.get(k) is not None}
        problems += stale(c, recorded.get(c["name"]))
        if r["status"] != "ok":
            problems.append(f"{c['name']}: vLLM failed: {r.get('error', '')[:300]}")
            continue
        diff = compare(r, simulate_case(Path(c["drafter"]), PROMPTS, "auto", Path(c["target"]), K, MAX_TOKENS))
        c["simulate_equals_vllm"] = not diff
        problems += [f"{c['name']}: simulate: {d[:300]}" for d in diff]
        print(f"[{'FAIL' if diff else 'OK  '}] {c['name']}: {c['architectures']}, projections {c['projections']}, "
              f"accepted {r['num_accepted_tokens']}/{r['num_draft_tokens']}")
    if args.record:
        RECORD.write_text(json.dumps({"vllm": results.get("vllm"), "recorded_by": ".ci/vllm_written_archs.py --record",
                                      "num_speculative_tokens": K, "max_tokens": MAX_TOKENS,
                                      "cases": {c["name"]: {k: v for k, v in c.items() if k not in ("name", "drafter",
                                                                                                   "target")}
                                                for c in cases}}, indent=1) + "\n")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
