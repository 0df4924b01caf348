"""simulate against real vLLM, end to end, side by side: the laptop promise (issue 8: >= 10x faster).

    python benchmarks/simulate_vs_vllm.py [--repeat N] [--drafter eagle3|eagle31] [--vllm-mode in-process|default] [--json OUT]

Both sides run the same job from a cold process: the tiny pair's 4 prompts, K=3, max_tokens 32, float32, greedy.
``simulate`` is ``python -m eagleconv simulate ... --json`` (interpreter start, imports, target load, decoding);
vLLM is .ci/vllm_parity_runner.py in the vLLM virtualenv (.ci/vllm-env) with one case (interpreter start, imports,
engine start, generate).  The two alternate within each repetition so machine noise hits both; both must produce
the same tokens and counters, or the row is not reported.  The speedup is the median of the per-pair ratios
(vLLM / simulate), with their min-max.

``--vllm-mode default`` runs vLLM as a user's script does (``LLM(...)`` with its engine core in a separate
process, VLLM_ENABLE_V1_MULTIPROCESSING=1) instead of the in-process engine the parity tier uses; the drafted
tokens cannot be captured across the process boundary, so that mode compares tokens and counters only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAIR = REPO / "fixtures" / "tiny-pair"
VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eagleconv-ci" / "vllm-0.32.0"
KEYS = ("tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position", "drafts")


def run_simulate(drafter: str) -> tuple[float, dict]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "eagleconv", "simulate", str(PAIR / drafter), "--target",
                          str(PAIR / "target"), "--prompts", str(PAIR / "prompts.json"), "--json"],
                         capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.stdout[out.stdout.index("{"):])


def run_vllm(drafter: str, work: Path, mode: str = "in-process") -> tuple[float, dict]:
    req, res = work / "req.json", work / "res.json"
    req.write_text(json.dumps({"target": str(PAIR / "target"), "prompts": json.loads((PAIR / "prompts.json").read_text()),
                               "num_speculative_tokens": 3, "max_tokens": 32,
                               "cases": [{"name": drafter, "drafter": str(PAIR / drafter)}]}))
    res.unlink(missing_ok=True)
    start = time.perf_counter()
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if mode == "default" else "0"}
    subprocess.run([str(VENV / "bin" / "python"), str(REPO / ".ci" / "vllm_parity_runner.py"), str(req), str(res)],
                   capture_output=True, text=True, check=True, env=env)
    seconds = time.perf_counter() - start
    return seconds, json.loads(res.read_text())["cases"][drafter]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--drafter", default="eagle3", choices=("eagle3", "eagle31"))
    ap.add_argument("--vllm-mode", default="in-process", choices=("in-process", "default"),
                    help="vLLM's engine in this process (the parity tier's setting) or as a user runs it (default)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    keys = KEYS if args.vllm_mode == "in-process" else tuple(k for k in KEYS if k != "drafts")
    if not (VENV / ".ready").exists():
        print(f"no vLLM virtualenv at {VENV}: run .ci/vllm-env first")
        return 2
    sim_times, vllm_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            order = (run_simulate, run_vllm) if i % 2 == 0 else (run_vllm, run_simulate)
            results = {}
            for fn in order:
                seconds, result = run_simulate(args.drafter) if fn is run_simulate else run_vllm(args.drafter, Path(tmp), args.vllm_mode)
                (sim_times if fn is run_simulate else vllm_times).append(seconds)
                results[fn.__name__] = result
            same = all(results["run_simulate"][k] == results["run_vllm"][k] for k in keys)
            print(f"rep {i + 1}: simulate {sim_times[-1]:.1f} s, vLLM {vllm_times[-1]:.1f} s, "
                  f"identical {'/'.join(keys)}: {same}", flush=True)
            if not same:
                print("simulate and vLLM disagree: no row")
                return 1
    s, v = statistics.median(sim_times), statistics.median(vllm_times)
    ratios = [vt / st for st, vt in zip(sim_times, vllm_times, strict=True)]  # per pair: the goal is judged on these
    row = {"drafter": args.drafter, "repeat": args.repeat, "vllm_mode": args.vllm_mode, "simulate_s": sim_times, "vllm_s": vllm_times,
           "simulate_median_s": round(s, 2), "vllm_median_s": round(v, 2), "pair_speedups": [round(r, 2) for r in ratios],
           "speedup": round(statistics.median(ratios), 2), "speedup_min_max": [round(min(ratios), 2), round(max(ratios), 2)]}
    print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
