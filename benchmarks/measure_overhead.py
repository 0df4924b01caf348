#!/usr/bin/env python3
"""What ``eagleconv measure`` adds to a served engine's own wall time (issue 25's goal: at most 5%).

Alternating pairs against a running server: a plain client (requests, one completion at a time, the same bodies,
nothing else) and ``eagleconv.measurement.measure()`` (the same requests plus a /metrics scrape after each and the
wait for the counters to settle), their order alternating; the ratio measure / plain within each pair, median and
spread (min-max) over the pairs.  On a loaded machine the engine's own time drifts more than measure adds, so each
measure run also records its wall time over the sum of its requests' own times (what it spends outside them: the
/metrics scrapes, the wait for the counters to settle, the set-up requests).  The server must be a dedicated one (measure refuses foreign traffic).

    python benchmarks/measure_overhead.py URL --prompts FILE [--max-tokens 32] [--pairs 6] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagleconv.measurement import measure, read_prompts
from eagleconv.measurement.servers import PROFILES


def plain(url: str, prompts: list[list[int]], max_tokens: int, engine: str) -> float:
    import requests

    profile = PROFILES[engine]
    model = requests.get(url + profile.models, timeout=30).json()["data"][0]["id"]
    session = requests.Session()
    start = time.perf_counter()
    for p in prompts:
        reply = session.post(url + profile.completion, json=profile.body(p, max_tokens, model, False), timeout=600)
        reply.raise_for_status()
        reply.json()
    return time.perf_counter() - start


IN_RUN: list[float] = []  # per measure run: its wall time / the sum of its requests' own times


def with_measure(url: str, prompts: list[list[int]], max_tokens: int, engine: str) -> float:
    start = time.perf_counter()
    report = measure(url, prompts, max_tokens=max_tokens, engine=engine)
    wall = time.perf_counter() - start
    IN_RUN.append(wall / sum(p.seconds for p in report.prompts))
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    prompts = read_prompts(args.prompts)
    plain(args.url, prompts[:1], 4, args.engine)  # warm the server (its first request compiles and allocates)
    pairs = []
    for i in range(args.pairs):
        order = ("plain", "measure") if i % 2 == 0 else ("measure", "plain")
        times = {}
        for name in order:
            fn = plain if name == "plain" else with_measure
            times[name] = fn(args.url, prompts, args.max_tokens, args.engine)
        pairs.append({**times, "order": list(order), "ratio": times["measure"] / times["plain"]})
        print(f"pair {i}: plain {times['plain']:.2f} s, measure {times['measure']:.2f} s, "
              f"ratio {pairs[-1]['ratio']:.4f}", file=sys.stderr)
    ratios = [p["ratio"] for p in pairs]
    result = {"benchmark": "measure_overhead", "url": args.url, "engine": args.engine, "prompts": len(prompts),
              "max_tokens": args.max_tokens, "pairs": pairs, "median_ratio": statistics.median(ratios),
              "min_ratio": min(ratios), "max_ratio": max(ratios), "in_run_ratios": IN_RUN,
              "median_in_run_ratio": statistics.median(IN_RUN), "goal": "median ratio <= 1.05"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")  # one file per benchmark and date
    path = out / f"measure-overhead-{args.engine}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"median ratio {result['median_ratio']:.4f} (spread {result['min_ratio']:.4f}-{result['max_ratio']:.4f}), "
          f"in-run {result['median_in_run_ratio']:.4f}; "
          f"{path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
