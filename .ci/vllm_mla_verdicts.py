"""The MLA verdict matrix through real vLLM 0.32.  Run it through ``.ci/vllm-parity --mla-verdicts [--record]``.

    python .ci/vllm_mla_verdicts.py --vllm-python VENV/bin/python [--work DIR] [--only NAME ...] [--record]

1. builds the seeded tiny DeepSeek-V3 targets (topk_method noaux_tc, and unset as transformers saves it) and the
   synthetic MLA drafters of eagleconv.validation.parity_mla: two bases (EAGLE-3, EAGLE-3.1; model_type deepseek_v2), every
   variant, and what eagleconv writes for vLLM from MLA input (``convert --to vllm`` of a TorchSpec Kimi drafter,
   ``upgrade``, ``downgrade``);
2. predicts each variant's outcome (``validate --engine vllm:0.32 --target``);
3. runs them all in real vLLM (.ci/vllm_mla_runner.py: the parity runner with the CPU rotary op off, and the draft
   model config vLLM built: its model_type and whether it runs as MLA);
4. checks: each variant's observed outcome (fails / drafts as its base / drafts otherwise) equals the prediction;
   every drafter eagleconv wrote loads, keeps its model_type and runs as MLA; and for every case that loads,
   ``simulate`` (transformers target) gives vLLM's tokens, counters and every drafted token.  Exit 1 on a mismatch.
``--record`` writes fixtures/mla-variants/vllm-0.32.0-outcomes.json (read by tests/engines/test_vllm_mla_verdicts.py).
Costs ~1-2 min of vLLM per case on 2 cores, ~25 cases: too slow for CI, which checks the record only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / ".ci"))

from eagleconv.validation import parity_mla as mla  # noqa: E402
from eagleconv.validation.parity import OUTCOME_TEXT, agrees, predict  # noqa: E402
from vllm_parity import COMPARED, compare, run_vllm, simulate_case  # noqa: E402

K, MAX_TOKENS = 3, 16
PROMPTS = [[395, 376, 441, 62, 39, 510, 125, 165], [272, 25, 192, 134, 143, 212, 391, 395],
           [410, 152, 488, 126, 254, 396, 334, 494]]


def written_cases(work: Path, target: Path) -> list[dict]:
    """What eagleconv writes for vLLM from MLA input (issue 32, deliverable 4): each must load as MLA."""
    import eagleconv
    from dataclasses import replace

    from eagleconv.synthetic import make_drafter

    torchspec = make_drafter(work / "torchspec-kimi-eagle31", replace(mla.recipe("eagle31"), producer="torchspec"))
    out = []
    converted = work / "torchspec-kimi-eagle31-to-vllm-eagle3"
    report = eagleconv.convert(torchspec, converted, "vllm", overwrite=True)
    assert report.ok, report.findings
    out.append({"name": "convert --to vllm of a TorchSpec kimi_k2 EAGLE-3.1 drafter", "drafter": str(converted)})
    upgraded = work / "mla-eagle3-upgraded"
    eagleconv.upgrade(mla.build_base("eagle3", work), upgraded, overwrite=True)
    out.append({"name": "upgrade of the EAGLE-3 base (fc_norm + norm_output)", "drafter": str(upgraded)})
    downgraded = work / "mla-eagle3-downgraded"
    eagleconv.downgrade(mla.build_base("eagle31", work), downgraded, allow_lossy=True, overwrite=True)
    out.append({"name": "downgrade of the EAGLE-3.1 base", "drafter": str(downgraded)})
    torchspec3 = make_drafter(work / "torchspec-kimi-eagle3", replace(mla.recipe("eagle3"), producer="torchspec"))
    upgraded = work / "torchspec-kimi-eagle3-upgraded-to-vllm-eagle3"
    eagleconv.upgrade(torchspec3, upgraded, to="vllm", overwrite=True)
    out.append({"name": "upgrade --to vllm of a TorchSpec kimi_k2 EAGLE-3 drafter", "drafter": str(upgraded)})
    downgraded = work / "torchspec-kimi-eagle31-downgraded-to-vllm-eagle3"
    eagleconv.downgrade(torchspec, downgraded, allow_lossy=True, to="vllm", overwrite=True)
    out.append({"name": "downgrade --to vllm of a TorchSpec kimi_k2 EAGLE-3.1 drafter", "drafter": str(downgraded)})
    return [{**c, "kind": "written", "written": json.loads((Path(c["drafter"]) / "config.json").read_text())[
        "model_type"]} for c in out]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True, help="python of the vLLM virtualenv (.ci/vllm-env)")
    ap.add_argument("--work", type=Path, help="working directory (default: a temporary one)")
    ap.add_argument("--only", action="append", default=[], help="run only cases whose name contains this")
    ap.add_argument("--case-timeout", type=float, default=420.0)
    ap.add_argument("--record", action="store_true", help=f"write the outcomes to {mla.RECORD.relative_to(REPO)}")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-vllm-mla-"))
    work.mkdir(parents=True, exist_ok=True)
    targets = {}
    for routing in ("noaux_tc", "unset"):
        targets[routing] = mla.build_target(work / f"target-{routing}", routing)
        index = json.loads((mla.MLA_VARIANTS_DIR / f"target-{routing}" / "model.safetensors.index.json").read_text())
        from safetensors import safe_open

        with safe_open(str(targets[routing] / "model.safetensors"), "pt") as f:
            if set(f.keys()) != set(index["weight_map"]):
                print(f"the committed target-{routing} index does not list the built target's tensors", file=sys.stderr)
                return 1
    cases: list[dict] = [{"name": f"base {b}", "drafter": str(mla.build_base(b, work)), "kind": "base", "base": b}
                         for b in mla.BASES]
    for v in mla.VARIANTS:
        path = mla.build_variant(v, work)
        outcome, why = predict(path, targets[v.routing])
        cases.append({"name": v.name, "drafter": str(path), "kind": "variant", "base": v.base, "what": v.what,
                      "predicted": outcome, "findings": why, "known_gap": v.known_gap, "stated": v.stated,
                      "target": str(targets[v.routing])})
    cases += written_cases(work, targets["noaux_tc"])
    if args.only:
        cases = [c for c in cases if c["kind"] == "base" or any(o in c["name"] for o in args.only)]
    start = time.monotonic()
    request = {"target": str(targets["noaux_tc"]), "prompts": PROMPTS, "num_speculative_tokens": K,
               "max_tokens": MAX_TOKENS, "cases": [{k: c[k] for k in ("name", "drafter", "target") if k in c}
                                                   for c in cases]}
    results = run_vllm(args.vllm_python, request, work, args.case_timeout, runner="vllm_mla_runner.py")
    seconds = time.monotonic() - start
    bases = {c["base"]: results["cases"][c["name"]] for c in cases if c["kind"] == "base"}
    failures: list[str] = []
    for c in cases:
        r = results["cases"][c["name"]]
        c["vllm"] = {k: v for k, v in r.items() if k != "traceback"}
        problems = []
        if c["kind"] == "base" and r["status"] != "ok":
            problems.append(f"vLLM failed on a base drafter: {r.get('error')}")
        elif c["kind"] == "written":
            draft = r.get("draft", {})
            if r["status"] != "ok" or draft.get("model_type") != c["written"] or not draft.get("use_mla"):
                problems.append(f"eagleconv wrote model_type {c['written']}: vLLM {r['status']} "
                                f"{r.get('error', '')[:300]} held it as {draft}")
        elif c["kind"] == "variant":
            if r["status"] != "ok":
                c["observed"] = "fails"
            elif bases[c["base"]]["status"] != "ok":
                c["observed"] = "unknown"
            else:
                same = all(r.get(k) == bases[c["base"]].get(k) for k in COMPARED)
                c["observed"] = ("differs" if same else "intended") if c["stated"] else \
                    ("intended" if same else "differs")
            if not agrees(c["predicted"], c["observed"]):
                problems.append(f"eagleconv predicted '{OUTCOME_TEXT[c['predicted']]}', vLLM: "
                                f"{OUTCOME_TEXT.get(c['observed'], c['observed'])}")
                if c["known_gap"]:
                    c["known"], problems = problems, []
        if r["status"] == "ok":  # simulate must draft what vLLM drafted, for every case that loads
            sim = simulate_case(Path(c["drafter"]), PROMPTS, "auto", Path(c.get("target") or targets["noaux_tc"]),
                                K, MAX_TOKENS)
            c["simulate_equals_vllm"] = not compare(r, sim)
            problems += [f"simulate: {p}" for p in compare(r, sim)]
        c["problems"] = problems
        failures += [f"{c['name']}: {p}" for p in problems]
        counters = (f"accepted {r['num_accepted_tokens']}/{r['num_draft_tokens']}, per position "
                    f"{r['accepted_per_position']}, held as {r.get('draft')}") if r["status"] == "ok" \
            else f"vLLM: {r.get('error', '')[:200]}"
        verdict = f" | predicted {c['predicted']}, observed {c['observed']}" if c["kind"] == "variant" else ""
        print(f"[{'FAIL' if problems else 'KNOWN' if c.get('known') else 'OK  '}] {c['name']}: {counters}{verdict}")
        for p in problems + c.get("known", []):
            print(f"         {p[:400]}")
    (work / "mla-verdicts.json").write_text(json.dumps({"vllm": results.get("vllm"), "seconds": seconds,
                                                        "cases": cases}, indent=1))
    if args.record:
        kept = json.loads(mla.RECORD.read_text())["outcomes"] if args.only and mla.RECORD.exists() else {}
        mla.RECORD.write_text(json.dumps({
            "vllm": results.get("vllm"), "recorded_by": ".ci/vllm-parity --mla-verdicts --record",
            "runner": "V1 (VLLM_USE_V2_MODEL_RUNNER=0, CPU), enforce_eager, custom_ops -rotary_embedding",
            "num_speculative_tokens": K, "max_tokens": MAX_TOKENS, "prompts": PROMPTS,
            "outcomes": {**kept, **{c["name"]: {
                "kind": c["kind"], "observed": c.get("observed"), "what": c.get("what"),
                "known_gap": c.get("known_gap", ""),
                "vllm": ({"held_as": c["vllm"].get("draft"), **{k: c["vllm"][k] for k in (
                    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")}}
                    if c["vllm"]["status"] == "ok" else {"error": c["vllm"].get("error", "")[:600]}),
                **({"eagleconv": {"predicted": c["predicted"], "findings": c["findings"]}}
                   if c["kind"] == "variant" else {}),
                **({"written_model_type": c["written"]} if c["kind"] == "written" else {}),
                **({"simulate_equals_vllm": c["simulate_equals_vllm"]} if "simulate_equals_vllm" in c else {}),
            } for c in cases}},
        }, indent=1) + "\n")
        (work / "mla-verdicts.md").write_text(table(json.loads(mla.RECORD.read_text())["outcomes"]))
    print(f"\n{len(cases)} cases, {len(failures)} problems; vLLM took {seconds:.0f} s; details in {work}")
    return 1 if failures else 0


def table(outcomes: dict) -> str:
    """The recorded matrix as docs/simulate.md shows it (``outcomes``: the record's)."""
    import re

    lines = ["| variant | eagleconv's prediction | what vLLM 0.32.0 did |", "|---|---|---|"]
    for name, r in outcomes.items():
        v = r["vllm"]
        if "error" in v:
            mtp = re.search(r"Model architectures \[[^\]]*\] are not supported", v["error"])
            error = mtp.group(0) if mtp else v["error"].split(" The available")[0].split("\n")[0]
            did = f"fails: `{error[:110]}`"
        else:
            held = v["held_as"]
            did = (f"{OUTCOME_TEXT[r['observed']] if r.get('observed') else 'loads and runs'}; held as "
                   f"`{held['model_type']}`, MLA {'yes' if held['use_mla'] else 'no'}")
        if r["kind"] == "variant":
            codes = sorted({" ".join(f.split()[:2]).rstrip(":") for f in r["eagleconv"]["findings"]})
            predicted = f"**{OUTCOME_TEXT[r['eagleconv']['predicted']]}** ({', '.join(codes) or 'no finding'})"
        else:
            predicted = f"writes `{r['written_model_type']}`" if r["kind"] == "written" else \
                "base (synthetic vllm recipe: `deepseek_v2`)"
        lines.append(f"| {name} | {predicted} | {did} |")
    return "\n".join(lines) + "\n"

if __name__ == "__main__":
    sys.exit(main())
