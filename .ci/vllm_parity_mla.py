"""The vLLM parity tier's MLA part (``.ci/vllm-parity --mla``): fixtures/mla-pair in real vLLM 0.32.0.

    python .ci/vllm_parity.py --vllm-python VENV/bin/python --mla [--work DIR] [--record] [--pair DIR]

``--pair`` names another directory laid out like fixtures/mla-pair (dense/ and moe/, each a pair).

1. checks that vLLM's CPU rotary custom op still rotates 3-D ``[T, H, D]`` tensors wrongly
   (.ci/vllm_rotary_check.py in the vLLM virtualenv: vLLM's own ``RotaryEmbedding``, op against
   ``forward_native``).  MLA passes ``q_pe`` in that shape (vllm/model_executor/layers/mla.py), so a DeepSeek-V3
   target with ``rope_type: default`` (both of the pair's) computes other logits than transformers when the op is
   on.  The parity cases therefore run vLLM with ``compilation_config={"custom_ops": ["-rotary_embedding"]}``
   (vLLM's own native rotary); the day a release fixes the op this check fails and says so, and the cases should
   then run as shipped;
2. converts each drafter of the pair (TorchSpec's Kimi layout, ``model_type: kimi_k2``) with ``eagleconv convert
   --to vllm`` (as a user would), for both targets (dense, MoE) and both drafters (EAGLE-3, EAGLE-3.1);
3. runs them in one vLLM process (one engine per case, one after another: vLLM's import is paid once), the op off
   (parity) and on (vLLM as shipped);
4. op off: vLLM's tokens, every round's drafts and the counters must equal ``simulate``'s exactly.  The DeepSeek-V3
   target runs in simulate through transformers (``--target-runtime auto`` falls back to it: eagleconv's own target
   forward is Llama/Qwen3 only); the time each simulate took is reported.  Op on: a known gap, not a tolerance:
   what differs (tokens, drafts, counters) is reported and, with ``--record``, written to
   fixtures/mla-pair/vllm-0.32.0-outcomes.json;
5. the upgraded eagle3 and the downgraded eagle31 of each target (.ci/vllm_parity_mla_transforms.py), op off: exact
   like the others, and their AL - 1 against their sources' (the upgrade's goal: at least 90% kept).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MLA_PAIR = REPO / "fixtures" / "mla-pair"
MLA_RECORD = MLA_PAIR / "vllm-0.32.0-outcomes.json"
TARGETS = ("dense", "moe")
DRAFTERS = ("eagle3", "eagle31")
ROTARY_GAP = ("vLLM 0.32.0's CPU rotary custom op (torch.ops._C.rotary_embedding, RotaryEmbedding.forward_cpu) "
              "rotates 3-D [T, H, D] tensors wrongly and MLA passes q_pe 3-D: with the op on (vLLM as shipped) the "
              "DeepSeek-V3 target's logits are not transformers', so its greedy tokens and the drafts differ from "
              "simulate's; the parity cases run with custom_ops ['-rotary_embedding']")


def rotary_check(python: str) -> list[str]:
    """Problems, empty when vLLM's rotary op is as broken as the tier assumes (3-D wrong, 2-D exact)."""
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run([python, str(REPO / ".ci" / "vllm_rotary_check.py")], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        return [f"the rotary check did not run (exit {proc.returncode}): {proc.stderr[-2000:]}"]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"[rotary op] vLLM {result['vllm']}: max |op - forward_native|, 3-D [T, H, D]: "
          + ", ".join(f"{k} {v:.3g}" for k, v in result["3d"].items()) + "; 2-D [T, H*D]: "
          + ", ".join(f"{k} {v:.3g}" for k, v in result["2d"].items()))
    problems = []
    if max(result["2d"].values()) > 1e-5:
        problems.append(f"vLLM's CPU rotary op now also differs from forward_native on 2-D input ({result['2d']}): "
                        "the Llama/Qwen3 cases run through it; look at this first")
    if min(result["3d"].values()) < 1e-3:
        problems.append(f"vLLM {result['vllm']}'s CPU rotary op now rotates 3-D [T, H, D] tensors as forward_native "
                        f"does ({result['3d']}): the bug the MLA cases work around is fixed. Run them with the op on "
                        "(drop 'rotary_op': False in .ci/vllm_parity_mla.py), delete the recorded known gap "
                        "(fixtures/mla-pair/vllm-0.32.0-outcomes.json) and the notes in docs/simulate.md")
    return problems


def mla_cases(work: Path, pair: Path = MLA_PAIR) -> list[dict]:
    """Each drafter converted from TorchSpec's layout to vLLM's by eagleconv; an op-off and an op-on case each."""
    from eagleconv.conversion import convert

    cases = []
    for kind in TARGETS:
        prompts = json.loads((pair / kind / "prompts.json").read_text())
        for base in DRAFTERS:
            out = work / f"mla-{kind}-{base}"
            report = convert(pair / kind / base, out, "vllm", overwrite=True)
            if not report.ok:
                raise SystemExit(f"eagleconv could not convert {pair / kind / base} to vllm: {report.findings}")
            for op in (False, True):
                cases.append({"name": f"mla {kind} {base} (rotary op {'on: as shipped' if op else 'off'})",
                              "drafter": str(out), "target": str(pair / kind / "target"), "prompts": prompts,
                              "rotary_op": op, "pair": kind, "base": base})
    return cases


def differences(vllm: dict, sim: dict) -> dict:
    """How far apart two runs are: differing token positions, differing draft rounds, counters side by side."""
    from itertools import zip_longest

    tokens = sum(a != b for va, sa in zip(vllm["tokens"], sim["tokens"]) for a, b in zip_longest(va, sa))
    drafts = sum(a != b for va, sa in zip(vllm["drafts"], sim["drafts"]) for a, b in zip_longest(va, sa))
    counters = {k: {"vllm": vllm[k], "simulate": sim[k]} for k in
                ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position") if vllm[k] != sim[k]}
    return {"differing_tokens": tokens, "of_tokens": sum(len(t) for t in vllm["tokens"]),
            "differing_draft_rounds": drafts, "of_draft_rounds": sum(len(d) for d in vllm["drafts"]),
            "counters": counters}


def mla_main(args, run_vllm, simulate_case, compare) -> int:
    """The --mla mode of .ci/vllm_parity.py (its run_vllm, simulate_case and compare passed in)."""
    work = args.work
    k, max_tokens = args.num_speculative_tokens, args.max_tokens
    pair = MLA_PAIR if args.pair.resolve() == (REPO / "fixtures" / "tiny-pair").resolve() else args.pair
    problems = rotary_check(args.vllm_python)
    for p in problems:
        print(f"[FAIL] rotary op: {p}")
    from vllm_parity_mla_transforms import added_seconds, retention, transform_cases, transform_record

    cases = mla_cases(work, pair) + transform_cases(work, pair, TARGETS)  # + the upgraded and downgraded drafters
    start = time.monotonic()
    results = run_vllm(args.vllm_python, {"target": cases[0]["target"], "prompts": cases[0]["prompts"],
                                          "num_speculative_tokens": k, "max_tokens": max_tokens,
                                          "cases": [{key: c[key] for key in ("name", "drafter", "target", "prompts",
                                                                             "rotary_op")} for c in cases]},
                       work, args.case_timeout)
    vllm_seconds = time.monotonic() - start
    sims: dict[tuple[str, str], dict] = {}
    gaps: dict[str, dict] = {}
    for c in cases:
        r = results["cases"][c["name"]]
        key = (c["pair"], c["base"])
        if key not in sims:
            t0 = time.monotonic()
            sims[key] = simulate_case(Path(c["drafter"]), c["prompts"], "auto", Path(c["target"]), k, max_tokens)
            sims[key]["seconds"] = round(time.monotonic() - t0, 1)
        sim = sims[key]
        c["vllm"] = {key: v for key, v in r.items() if key != "traceback"}
        c["simulate"] = sim
        found = [f"vLLM failed: {r.get('error')}"] if r["status"] != "ok" else compare(r, sim)
        if sim["status"] == "ok" and sim["target_runtime"] != "transformers":
            found.append(f"simulate ran the DeepSeek-V3 target with {sim['target_runtime']}, not transformers")
        if r["status"] == "ok":
            counters = (f"drafts {r['num_drafts']}, accepted {r['num_accepted_tokens']}/{r['num_draft_tokens']}, "
                        f"per position {r['accepted_per_position']}")
        else:
            counters = f"vLLM: {r.get('error', '')[:160]}"
        if c["rotary_op"] and r["status"] == "ok" and sim["status"] == "ok":
            gap = differences(r, sim)  # the known gap: recorded, never a pass/fail tolerance
            gaps[c["name"]] = {"vllm": {x: r[x] for x in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                                          "accepted_per_position")}, **gap}
            status = "KNOWN"
            print(f"[{status}] {c['name']}: {counters} | {gap['differing_tokens']}/{gap['of_tokens']} tokens and "
                  f"{gap['differing_draft_rounds']}/{gap['of_draft_rounds']} draft rounds differ from simulate"
                  + (f", counters {gap['counters']}" if gap["counters"] else ", counters equal"))
            continue
        c["problems"] = found
        problems += [f"{c['name']}: {p}" for p in found]
        print(f"[{'FAIL' if found else 'OK  '}] {c['name']}: {counters} | simulate (target in "
              f"{sim.get('target_runtime', '-')}) {sim['seconds']} s")
        for p in found:
            print(f"         {p[:400]}")
    print(f"         known gap: {ROTARY_GAP}")
    problems += retention(cases)  # AL - 1 of the upgraded / downgraded drafters against their sources'
    (work / "parity-mla.json").write_text(json.dumps({"vllm": results.get("vllm"), "vllm_seconds": vllm_seconds,
                                                      "cases": cases, "rotary_gap": gaps}, indent=1))
    if args.record:
        (MLA_RECORD if pair == MLA_PAIR else work / MLA_RECORD.name).write_text(json.dumps({
            "vllm": results.get("vllm"), "runner": "V1 (VLLM_USE_V2_MODEL_RUNNER=0, CPU), enforce_eager",
            "num_speculative_tokens": k, "max_tokens": max_tokens, "known_gap": ROTARY_GAP,
            "rotary_op_on": gaps, "transforms": transform_record(cases)}, indent=1) + "\n")
    sim_seconds = sum(s["seconds"] for s in sims.values())
    print(f"\nMLA: {len(cases)} vLLM cases, {len(problems)} problems, {len(gaps)} known-gap runs; vLLM took "
          f"{vllm_seconds:.0f} s, simulate {sim_seconds:.0f} s ({len(sims)} runs, target in transformers); "
          f"details in {work / 'parity-mla.json'}\n{added_seconds(cases)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit("run through .ci/vllm-parity --mla")
