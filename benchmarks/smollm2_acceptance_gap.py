"""Why the SmolLM2 drafters' served first-draft acceptance sits under their teacher-forced accuracy.

    python benchmarks/smollm2_acceptance_gap.py --pair DIR [--fit N] [--json FILE]

DIR is what ``fixtures/smollm2/build.py`` printed.  Two measurements per drafter (eagle3, eagle31):

1. **Selection.** ``simulate`` on ``DIR/prompts.json`` (K=3, 64 tokens), then the drafter's first pass over each
   whole generated sequence with the target's captured states (teacher forcing).  A round's first draft is the
   first pass's prediction at the row where the round starts (causal attention: that row sees exactly what the
   served proposer saw), so the script checks that they are equal in every round, then compares the per-row
   accuracy over all response rows with the accuracy at the rows where rounds start, after a rejection and after
   all K drafts were accepted.
2. **Fit** (``--fit N``, default 48; 0 skips it; ~1 min of generation with transformers): teacher-forced chain
   accuracy per draft position on N of the build's training prompts against N held-out prompts that neither
   training nor ``prompts.json`` used (build.py's own generation and ``train.position0_acceptance``).

Not run by CI; its output is in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "fixtures" / "smollm2"))

DRAFTERS = ("eagle3", "eagle31")


def selection(pair: Path, name: str) -> dict:
    """Served first drafts against teacher-forced first-pass predictions on the same sequences."""
    import torch

    from eagleconv.forward.inputs import open_target
    from eagleconv.simulation import engine_drafter, simulate

    prompts = json.loads((pair / "prompts.json").read_text())
    report = simulate(pair / name, pair / "target", prompts, num_speculative_tokens=3, max_tokens=64)
    target = open_target(pair / "target", "eagleconv")
    d = engine_drafter(pair / name, "vllm:0.32", target)
    counts = {"rounds": 0, "same": 0, "rows": 0, "rows_hit": 0, "starts_hit": 0,
              "after_reject": 0, "after_reject_hit": 0, "after_full": 0, "after_full_hit": 0}
    for prompt, generated, drafts in zip(prompts, report.tokens, report.drafts):
        seq = list(prompt) + list(generated)
        T = len(seq) - 1
        with torch.no_grad():
            _, states = target.forward(seq, d.capture)
            aux = torch.cat([states[i] for i in d.capture], -1)[:T]
            first = d.model.forward(torch.tensor([seq[1:]]), torch.arange(T), d.model.combine(aux.unsqueeze(0)))
        pred = first.logits[0].argmax(-1).tolist()  # row j predicts seq[j + 2]
        for j in range(len(prompt) - 1, T - 1):
            counts["rows"] += 1
            counts["rows_hit"] += pred[j] == seq[j + 2]
        length, previous = len(prompt) + 1, None  # tokens verified when the round starts
        for draft in drafts:
            if length >= len(seq):  # the proposal after the last verification: never checked
                break
            j = length - 2
            hit = draft[0] == seq[j + 2]
            counts["rounds"] += 1
            counts["same"] += pred[j] == draft[0]
            counts["starts_hit"] += hit
            if previous is not None:
                kind = "after_full" if previous else "after_reject"
                counts[kind] += 1
                counts[kind + "_hit"] += hit
            accepted = 0
            while accepted < len(draft) and length + accepted < len(seq) and draft[accepted] == seq[length + accepted]:
                accepted += 1
            previous = accepted == len(draft)
            length += accepted + 1
    counts["accepted_per_position"] = report.accepted_per_position
    return counts


def fit(pair: Path, n: int) -> dict:
    """Teacher-forced chain accuracy on n training prompts and n unseen held-out ones."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import build
    import train

    torch.set_num_threads(build.THREADS)
    spec = build.SMOL
    model = AutoModelForCausalLM.from_pretrained(pair / "target", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(pair / "target")
    questions = build.questions(build.stdlib_docs())
    unseen = build.N_TRAIN + build.N_CANDIDATES  # past the training prompts and prompts.json's candidates
    if len(questions) < unseen + n:
        raise SystemExit(f"only {len(questions)} questions: {unseen + n} needed for --fit {n}")
    sets = {"train": questions[:n], "held_out": questions[unseen:unseen + n]}
    embed = model.model.embed_tokens.weight.detach()
    out: dict = {}
    for label, qs in sets.items():
        prompts = [build.chat_ids(tokenizer, q) for q in qs]
        with torch.no_grad():
            rows = build.generate(model, prompts, spec, build.GEN_TOKENS, spec.eos_token_id, n, log=lambda m: None)
        tokens, aux, labels = build.pad_right(rows, spec, spec.eos_token_id)
        lens = torch.tensor([len(p) for p in prompts])
        for name, eagle31 in build.DRAFTERS:
            stored = load_file(REPO / "fixtures" / "smollm2" / "drafters" / f"{name}.safetensors")
            draft_ids = stored["t2d"].nonzero().flatten()
            p = {k: v.float() for k, v in stored.items() if k not in ("d2t", "t2d")}
            p["lm_head.weight"] = embed[draft_ids].contiguous()
            t2d_index = torch.full((spec.vocab + 1,), -1, dtype=torch.int64)
            t2d_index[draft_ids] = torch.arange(len(draft_ids))
            acc = train.position0_acceptance(p, embed, aux, tokens, labels, eagle31, lens, t2d_index, spec)
            out.setdefault(name, {})[label] = acc
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True)
    ap.add_argument("--fit", type=int, default=48, metavar="N")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result: dict = {"selection": {}, "fit": {}}
    for name in DRAFTERS:
        c = result["selection"][name] = selection(args.pair, name)
        print(f"{name}: served first draft = teacher-forced first-pass prediction in {c['same']}/{c['rounds']} rounds; "
              f"per-row accuracy over all response rows {c['rows_hit']}/{c['rows']} ({c['rows_hit'] / c['rows']:.1%}), "
              f"at round starts {c['starts_hit']}/{c['rounds']} ({c['starts_hit'] / c['rounds']:.1%}): after a "
              f"rejection {c['after_reject_hit']}/{c['after_reject']}, after all K accepted "
              f"{c['after_full_hit']}/{c['after_full']}", flush=True)
    if args.fit:
        result["fit"] = fit(args.pair, args.fit)
        for name, sets in result["fit"].items():
            print(f"{name}: teacher-forced accuracy per position, {args.fit} training prompts "
                  + ", ".join(f"{a:.1%}" for a in sets["train"]) + f"; {args.fit} unseen prompts "
                  + ", ".join(f"{a:.1%}" for a in sets["held_out"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(c["same"] == c["rounds"] for c in result["selection"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
