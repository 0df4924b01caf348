#!/usr/bin/env python3
"""simulate's default threads against every ``--threads N``, idle and beside CPU-bound processes (issue 27, item 1).

    python benchmarks/simulate_threads.py PAIR [--repeat 3] [--burners 2] [--prompts 2] [-k 3] [--max-tokens 64]
        [--timeout 300] [--json OUT]

PAIR holds ``target/``, ``eagle3/`` and ``prompts.json`` (``fixtures/smollm2/build.py``, or ``fixtures/tiny-pair``
with a prompts file).  Each repetition runs, for each condition (``idle``: nothing started beside it; ``busy``:
``--burners`` processes spinning ``while 1: pass``, started before and killed after the condition's runs), the CLI
``eagleconv simulate`` with the default threads and with ``--threads 1..cores``, in an order rotated every
repetition (alternating pairs).  Every run records wall and CPU time, the 1-minute load average before it, and for
the default the threads chosen (the report's note, else every core).  The figure per condition is the median over
repetitions of default / best ``--threads`` (best: the fastest median); "idle" on a shared machine is not idle, so
the load is recorded with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def run_once(pair: Path, prompts: Path, threads: int | None, k: int, max_tokens: int, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "eagleconv", "simulate", str(pair / "eagle3"), "--target", str(pair / "target"),
           "--prompts", str(prompts), "--num-speculative-tokens", str(k), "--max-tokens", str(max_tokens), "--json"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"threads": threads, "wall_s": None, "timed_out": True, "loadavg_1m": load}
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped children only: the burners are still running
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    report = json.loads(out)
    chosen = None
    if threads is None:
        chosen = len(os.sched_getaffinity(0))
        for note in report.get("notes", []):
            m = re.match(r"(\d+) of \d+ CPU threads: other processes kept ([\d.]+) cores busy", note)
            if m:
                chosen = int(m.group(1))
    return {"threads": threads, "chosen": chosen, "wall_s": wall, "cpu_s": cpu, "loadavg_1m": load,
            "acceptance_length": report["acceptance_length"], "num_drafts": report["num_drafts"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pair", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=2, help="the first N of PAIR/prompts.json")
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300, help="per run; a run past it counts as this long")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    cores = len(os.sched_getaffinity(0))
    prompts = Path(tempfile.mkdtemp(prefix="eagleconv-threads-")) / "prompts.json"
    prompts.write_text(json.dumps(json.loads((args.pair / "prompts.json").read_text())[:args.prompts]))
    modes: list[int | None] = [None, *range(1, cores + 1)]
    runs: list[dict] = []
    out = {"pair": str(args.pair), "cores": cores, "burners": args.burners, "prompts": args.prompts,
           "num_speculative_tokens": args.num_speculative_tokens, "max_tokens": args.max_tokens,
           "command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs}
    for rep in range(args.repeat):
        for condition in ("idle", "busy"):
            burners = []
            if condition == "busy":
                bound = args.timeout * len(modes) + 60
                burners = [subprocess.Popen([sys.executable, "-c", BURN.format(seconds=bound)])
                           for _ in range(args.burners)]
                time.sleep(2)
            try:
                shift = rep % len(modes)
                for threads in modes[shift:] + modes[:shift]:
                    r = run_once(args.pair, prompts, threads, args.num_speculative_tokens, args.max_tokens,
                                 args.timeout)
                    r.update(repetition=rep, condition=condition)
                    runs.append(r)
                    wall = f"{r['wall_s']:.1f} s" if r["wall_s"] is not None else "timed out"
                    print(f"rep {rep} {condition:4} threads {threads or 'default'}"
                          + (f" (chose {r['chosen']})" if threads is None else "")
                          + f": {wall}, load {r['loadavg_1m']:.1f}", flush=True)
                    if args.json:
                        args.json.write_text(json.dumps(out, indent=1) + "\n")
            finally:
                for b in burners:
                    b.kill()
                    b.wait()
    summary = {}
    for condition in ("idle", "busy"):
        def walls(mode: int | None, condition: str = condition) -> list[float]:
            return [r["wall_s"] if r["wall_s"] is not None else args.timeout for r in runs
                    if r["condition"] == condition and r["threads"] == mode]
        best = min(range(1, cores + 1), key=lambda n: statistics.median(walls(n)))
        ratios = [d / b for d, b in zip(walls(None), walls(best), strict=True)]
        summary[condition] = {"best_threads": best, "median_wall_s": {str(m or "default"): statistics.median(walls(m))
                                                                    for m in modes},
                              "default_over_best": statistics.median(ratios), "ratio_min": min(ratios),
                              "ratio_max": max(ratios)}
        s = summary[condition]
        print(f"{condition}: default / --threads {best} = {s['default_over_best']:.2f}x "
              f"({s['ratio_min']:.2f}-{s['ratio_max']:.2f}); medians {s['median_wall_s']}")
    out["summary"] = summary
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
