#!/usr/bin/env python3
"""What an upgraded starting point buys: EAGLE-3.1 fine-tuned for one small budget from ``upgrade``'s output and
from scratch, both measured with ``simulate``.  Not run by CI (minutes of CPU training).

    python benchmarks/upgrade_finetune.py PAIR [--iters 150] [--train-prompts 96] [--work DIR] [--json OUT]

PAIR is what ``fixtures/smollm2/build.py`` writes (target/, eagle3/, prompts.json).  The training data are the
target's greedy responses to the first ``--train-prompts`` of the build's own training prompts, made with the
build's functions; training is ``fixtures/tiny-pair/train.py``'s ``train_drafter`` (test-time training at
vLLM's proposer positions) with the build's dimensions and ``--iters`` steps, the same for both runs:

* ``from upgrade``: the calibrated ``upgrade`` of PAIR/eagle3 (fc_norm + norm_output, refit), as initial weights;
* ``from scratch``: the build's own initialisation of an EAGLE-3.1 drafter.

Both keep eagle3's draft vocabulary (its d2t/t2d), so the only difference is the starting point.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _module(name: str, path: Path):
    if not path.exists():
        raise SystemExit(f"{path} is absent: this benchmark reuses the SmolLM2 build's functions")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def training_data(build, train, pair: Path, count: int, spec):
    """(tokens, aux, labels, prompt lengths, prompts) for the first ``count`` training prompts, as the build makes them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(pair / "target", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(pair / "target")
    prompts = [build.chat_ids(tokenizer, q) for q in build.questions(build.stdlib_docs())[:count]]
    with torch.no_grad():
        rows = build.generate(target, prompts, spec, build.GEN_TOKENS, spec.eos_token_id, build.GEN_BATCH)
    tokens, aux, labels = build.pad_right(rows, spec, spec.eos_token_id)
    return tokens, aux, labels, torch.tensor([len(p) for p in prompts]), prompts, target


def draft_index(eagle3: Path, vocab: int):
    """eagle3's target-to-draft index (-1 outside its draft vocabulary, one extra -1 for padding labels)."""
    import torch
    from safetensors.torch import load_file

    t2d = load_file(eagle3 / "model.safetensors")["t2d"].bool()
    ids = torch.nonzero(t2d).flatten()
    index = torch.full((vocab + 1,), -1, dtype=torch.int64)
    index[ids] = torch.arange(len(ids))
    return index, ids


def save(train, spec, tensors: dict, eagle3: Path, out: Path) -> Path:
    from safetensors.torch import load_file, save_file

    vocab = load_file(eagle3 / "model.safetensors")
    out.mkdir(parents=True, exist_ok=True)
    save_file({**tensors, "d2t": vocab["d2t"], "t2d": vocab["t2d"]}, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(train.drafter_config(True, spec), indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pair", type=Path)
    ap.add_argument("--iters", type=int, default=150, help="training steps for each run (the equal budget)")
    ap.add_argument("--train-prompts", type=int, default=96)
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import torch
    from safetensors.torch import load_file

    import eagleconv
    from eagleconv.simulation import simulate

    torch.set_num_threads(1)
    train = _module("train", REPO / "fixtures" / "tiny-pair" / "train.py")
    build = _module("smollm2_build", REPO / "fixtures" / "smollm2" / "build.py")
    spec = dataclasses.replace(build.SMOL, train_iters=args.iters)
    work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-upgrade-finetune-"))
    work.mkdir(parents=True, exist_ok=True)
    pair = args.pair
    t0 = time.monotonic()
    tokens, aux, labels, prompt_len, prompts, target = training_data(build, train, pair, args.train_prompts, spec)
    print(f"training data: {tokens.shape[0]} sequences of {tokens.shape[1]} ({time.monotonic() - t0:.0f} s)", flush=True)
    t2d_index, draft_ids = draft_index(pair / "eagle3", spec.vocab)
    embed = target.model.embed_tokens.weight.detach()
    scratch_init = build.drafter_overrides(target, draft_ids)
    del target

    (work / "prompts.json").write_text(json.dumps(prompts))
    upgraded = work / "upgraded"
    eagleconv.upgrade(pair / "eagle3", upgraded, target=pair / "target", prompts=work / "prompts.json", overwrite=True)
    start = {k: v for k, v in load_file(upgraded / "model.safetensors").items() if k not in ("d2t", "t2d")}

    rows = {}
    for name, drafter in (("eagle3", pair / "eagle3"), ("upgraded, not fine-tuned", upgraded)):
        rows[name] = drafter
    for name, init in (("fine-tuned from upgrade", start), ("fine-tuned from scratch", scratch_init)):
        t1 = time.monotonic()
        p = train.train_drafter(True, embed, aux, tokens, labels, t2d_index, prompt_len, spec, init)
        rows[name] = save(train, spec, p, pair / "eagle3", work / name.replace(" ", "_"))
        print(f"{name}: {args.iters} steps in {time.monotonic() - t1:.0f} s", flush=True)
    results = []
    for name, drafter in rows.items():
        sim = simulate(drafter, pair / "target", pair / "prompts.json",
                                 num_speculative_tokens=args.num_speculative_tokens, max_tokens=args.max_tokens)
        results.append({"drafter": name, "acceptance_length": sim.acceptance_length,
                        "accepted_per_position": sim.accepted_per_position, "num_drafts": sim.num_drafts})
        print(f"{name}: AL {sim.acceptance_length:.3f}, per position {sim.accepted_per_position} of "
              f"{sim.num_drafts} drafts", flush=True)
    print(f"\n| drafter ({args.iters} steps, {args.train_prompts} prompts) | AL | accepted per position |\n|---|---|---|")
    for r in results:
        print(f"| {r['drafter']} | {r['acceptance_length']:.3f} | {r['accepted_per_position']} |")
    if args.json:
        args.json.write_text(json.dumps({"iters": args.iters, "train_prompts": args.train_prompts,
                                         "rows": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
