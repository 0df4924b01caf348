"""simulate against real vLLM, end to end, side by side: the laptop promise (issue 8: >= 10x faster).

    python benchmarks/simulate_vs_vllm.py [--repeat N] [--drafter eagle3|eagle31|DIR] [--vllm-mode in-process|default]
        [--target DIR] [--prompts FILE] [-k K] [--max-tokens N] [--threads N] [--json OUT]
    python benchmarks/simulate_vs_vllm.py --mla dense|moe [--drafter eagle3|eagle31] [--repeat N] [--json OUT]

Both sides run the same job from a cold process: by default the tiny pair's 4 prompts, K=3, max_tokens 32, float32,
greedy; ``--target``/``--prompts``/``--drafter DIR`` run another pair (issue 15: the SmolLM2 pair, K=3, 64 tokens).
``simulate`` is ``python -m eagleconv simulate ... --json`` (interpreter start, imports, target load, decoding);
vLLM is .ci/vllm_parity_runner.py in the vLLM virtualenv (.ci/vllm-env) with one case (interpreter start, imports,
engine start, generate).  The two alternate within each repetition so machine noise hits both; both must produce
the same tokens and counters, or the row is not reported.  The speedup is the median of the per-pair ratios
(vLLM / simulate), with their min-max.  Each row also records simulate's peak RSS (``wait4``'s ru_maxrss) against
the bytes of the target's and the drafter's safetensors files (issue 15's goal: at most 1.5x), and the load
average before each run (the machine may be shared), and each side's CPU seconds (user + system, its processes
that were waited for): on a loaded machine the wall time is mostly waiting for a core, the CPU time much less so.

``--vllm-mode default`` runs vLLM as a user's script does (``LLM(...)`` with its engine core in a separate
process, VLLM_ENABLE_V1_MULTIPROCESSING=1) instead of the in-process engine the parity tier uses; the drafted
tokens cannot be captured across the process boundary, so that mode compares tokens and counters only.

``--mla dense|moe`` runs fixtures/mla-pair's pair (issue 32's goal: simulate >= 3x faster than vLLM's whole process,
paired, median) as the MLA parity tier does (.ci/vllm_parity_mla.py): the TorchSpec Kimi drafter is converted once
beforehand by ``eagleconv convert --to vllm`` (as a user converts once; not timed), both sides read the converted
drafter, and vLLM runs with its CPU rotary custom op off (``custom_ops: ["-rotary_embedding"]``: it rotates MLA's
3-D ``q_pe`` wrongly, so with it on vLLM's tokens are not simulate's).  simulate runs the DeepSeek-V3 target in
transformers (``--target-runtime auto`` falls back to it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAIR = REPO / "fixtures" / "tiny-pair"
MLA_PAIR = REPO / "fixtures" / "mla-pair"
VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eagleconv-ci" / "vllm-0.32.0"
KEYS = ("tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position", "drafts")


def run_simulate(drafter: Path, target: Path, prompts: Path, k: int, max_tokens: int,
                 threads: int | None) -> tuple[float, dict, int]:
    """Seconds, the report, and the child's peak RSS in bytes."""
    cmd = [sys.executable, "-m", "eagleconv", "simulate", str(drafter), "--target", str(target), "--prompts",
           str(prompts), "--num-speculative-tokens", str(k), "--max-tokens", str(max_tokens), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"simulate failed (exit {proc.returncode}): {' '.join(cmd)}")
        out.seek(0)
        text = out.read()
    return seconds, json.loads(text[text.index("{"):]), usage.ru_maxrss * 1024  # Linux: kilobytes


def run_vllm(drafter: Path, target: Path, prompts: Path, k: int, max_tokens: int, work: Path,
             mode: str = "in-process", rotary_op: bool = True) -> tuple[float, dict]:
    req, res = work / "req.json", work / "res.json"
    req.write_text(json.dumps({"target": str(target), "prompts": json.loads(prompts.read_text()),
                               "num_speculative_tokens": k, "max_tokens": max_tokens,
                               "cases": [{"name": drafter.name, "drafter": str(drafter), "rotary_op": rotary_op}]}))
    res.unlink(missing_ok=True)
    start = time.perf_counter()
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if mode == "default" else "0"}
    subprocess.run([str(VENV / "bin" / "python"), str(REPO / ".ci" / "vllm_parity_runner.py"), str(req), str(res)],
                   capture_output=True, text=True, check=True, env=env)
    seconds = time.perf_counter() - start
    return seconds, json.loads(res.read_text())["cases"][drafter.name]


def weight_bytes(*dirs: Path) -> int:
    return sum(f.stat().st_size for d in dirs for f in d.glob("*.safetensors"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--drafter", default="eagle3", help="eagle3 or eagle31 (the tiny pair's) or a drafter directory")
    ap.add_argument("--target", type=Path, default=PAIR / "target")
    ap.add_argument("--prompts", type=Path, default=PAIR / "prompts.json")
    ap.add_argument("-k", "--num-speculative-tokens", dest="k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, help="simulate --threads (default: simulate's own, every core)")
    ap.add_argument("--vllm-mode", default="in-process", choices=("in-process", "default"),
                    help="vLLM's engine in this process (the parity tier's setting) or as a user runs it (default)")
    ap.add_argument("--mla", choices=("dense", "moe"), help="fixtures/mla-pair's pair instead (converted, rotary op off)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    pair = PAIR
    if args.mla:
        pair = MLA_PAIR / args.mla
        args.target, args.prompts = pair / "target", pair / "prompts.json"
    drafter = pair / args.drafter if args.drafter in ("eagle3", "eagle31") else Path(args.drafter).resolve()
    keys = KEYS if args.vllm_mode == "in-process" else tuple(k for k in KEYS if k != "drafts")
    if not (VENV / ".ready").exists():
        print(f"no vLLM virtualenv at {VENV}: run .ci/vllm-env first")
        return 2
    sim_times, vllm_times, rss, loads = [], [], [], []
    cpu: dict[str, list[float]] = {"simulate": [], "vllm": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.mla:  # once, untimed, as a user converts once: vLLM cannot run TorchSpec's kimi_k2 layout as is
            from eagleconv.conversion import convert

            converted = Path(tmp) / f"{drafter.name}-vllm"
            if not convert(drafter, converted, "vllm").ok:
                raise SystemExit(f"eagleconv could not convert {drafter} to vllm")
            drafter = converted
        job = (drafter, args.target.resolve(), args.prompts.resolve(), args.k, args.max_tokens)
        for i in range(args.repeat):
            order = ("simulate", "vllm") if i % 2 == 0 else ("vllm", "simulate")
            results = {}
            for side in order:
                loads.append(round(os.getloadavg()[0], 2))
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                if side == "simulate":
                    seconds, results[side], peak = run_simulate(*job, args.threads)
                    sim_times.append(seconds)
                    rss.append(peak)
                else:
                    seconds, results[side] = run_vllm(*job, Path(tmp), args.vllm_mode, rotary_op=not args.mla)
                    vllm_times.append(seconds)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[side].append(round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2))
            same = all(results["simulate"][k] == results["vllm"][k] for k in keys)
            print(f"rep {i + 1}: simulate {sim_times[-1]:.1f} s (peak RSS {rss[-1] / 2**20:.0f} MiB), vLLM "
                  f"{vllm_times[-1]:.1f} s, CPU {cpu['simulate'][-1]:.1f} / {cpu['vllm'][-1]:.1f} s, load {loads[-2:]}, identical {'/'.join(keys)}: {same}", flush=True)
            if not same:
                print("simulate and vLLM disagree: no row")
                return 1
        weights = weight_bytes(args.target, drafter)
    s, v = statistics.median(sim_times), statistics.median(vllm_times)
    ratios = [vt / st for st, vt in zip(sim_times, vllm_times, strict=True)]  # per pair: the goal is judged on these
    sim = results["simulate"]
    row = {"drafter": str(pair / args.drafter if args.mla else drafter), "target": str(args.target), "prompts": str(args.prompts), "k": args.k,
           "max_tokens": args.max_tokens, "repeat": args.repeat, "vllm_mode": args.vllm_mode,
           "vllm_rotary_op": not args.mla, "target_runtime": sim.get("target_runtime"),
           "acceptance_length": sim["acceptance_length"], "accepted_per_position": sim["accepted_per_position"],
           "num_drafts": sim["num_drafts"], "simulate_s": sim_times, "vllm_s": vllm_times,
           "simulate_median_s": round(s, 2), "vllm_median_s": round(v, 2),
           "simulate_cpu_s": cpu["simulate"], "vllm_cpu_s": cpu["vllm"],
           "cpu_speedup": round(statistics.median(b / a for a, b in zip(cpu["simulate"], cpu["vllm"], strict=True)), 2),
           "pair_speedups": [round(r, 2) for r in ratios], "speedup": round(statistics.median(ratios), 2),
           "speedup_min_max": [round(min(ratios), 2), round(max(ratios), 2)], "load_average_1min": loads,
           "simulate_peak_rss_bytes": rss, "weight_bytes": weights,
           "peak_rss_over_weights": round(max(rss) / weights, 2)}
    print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
