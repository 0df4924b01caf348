"""Acceptance of the SmolLM2 pair's drafters in real vLLM 0.32 and in ``eagleconv simulate``, per K.

    python benchmarks/smollm2_acceptance.py --pair DIR [--k 3 7] [--max-tokens 64] [--no-simulate] [--json FILE]

DIR is what ``fixtures/smollm2/build.py`` printed.  vLLM runs through .ci/vllm_parity_runner.py in the cached
virtualenv (.ci/vllm-env), one engine per drafter and K, all prompts in one generate call; simulate runs on the
same prompts.  Prints, per drafter and K, AL (1 + accepted / drafts) and the acceptance rate at each draft position
(accepted at position i / drafts), and whether simulate's tokens, counters and drafted tokens equal vLLM's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / ".ci"))
sys.path.insert(0, str(REPO))

COMPARED = ("tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position", "drafts")


def venv_python() -> str:
    venv = subprocess.run(["bash", str(REPO / ".ci" / "vllm-env")], capture_output=True, text=True, check=True)
    return str(Path(venv.stdout.strip()) / "bin" / "python")


def row(name: str, k: int, r: dict) -> str:
    drafts = r["num_drafts"]
    per = [a / drafts for a in r["accepted_per_position"]] if drafts else []
    al = 1 + r["num_accepted_tokens"] / drafts if drafts else float("nan")
    return (f"| {name} | {k} | {al:.3f} | " + " ".join(f"{p:.0%}" for p in per)
            + f" | {r['num_accepted_tokens']}/{r['num_draft_tokens']} over {drafts} drafts |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True)
    ap.add_argument("--k", type=int, nargs="+", default=[3, 7])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--drafters", nargs="+", default=["eagle3", "eagle31"])
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from vllm_parity import run_vllm  # .ci/vllm_parity.py: the runner with its hang timer

    prompts = json.loads((args.pair / "prompts.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="eagleconv-smollm2-acceptance-"))
    python = venv_python()
    out: dict = {"pair": str(args.pair), "max_tokens": args.max_tokens, "runs": []}
    lines = ["| drafter | K | AL | accepted per position | accepted |", "|---|---:|---:|---|---|"]
    ok = True
    for k in args.k:
        start = time.monotonic()
        results = run_vllm(python, {"target": str(args.pair / "target"), "prompts": prompts,
                                    "num_speculative_tokens": k, "max_tokens": args.max_tokens,
                                    "cases": [{"name": d, "drafter": str(args.pair / d)} for d in args.drafters]},
                           work, 1800.0)
        print(f"vLLM K={k}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        for d in args.drafters:
            r = results["cases"][d]
            entry = {"drafter": d, "k": k, "vllm": {key: r.get(key) for key in COMPARED + ("status", "error")}}
            if r["status"] != "ok":
                print(f"vLLM failed on {d}: {r.get('error')}", file=sys.stderr)
                ok = False
                out["runs"].append(entry)
                continue
            lines.append(row(d, k, r))
            if not args.no_simulate:
                from eagleconv.simulation import simulate

                t = time.monotonic()
                sim = simulate(args.pair / d, args.pair / "target", prompts, num_speculative_tokens=k,
                               max_tokens=args.max_tokens).model_dump()
                diff = [key for key in COMPARED if sim.get(key) != r.get(key)]
                entry["simulate"] = {key: sim.get(key) for key in COMPARED + ("target_runtime",)}
                entry["simulate_equals_vllm"] = not diff
                entry["simulate_seconds"] = round(time.monotonic() - t, 1)
                print(f"simulate {d} K={k}: {'equals vLLM' if not diff else 'DIFFERS in ' + ', '.join(diff)} "
                      f"({entry['simulate_seconds']} s, {sim.get('target_runtime')})", file=sys.stderr, flush=True)
                ok = ok and not diff
            out["runs"].append(entry)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
