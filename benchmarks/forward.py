#!/usr/bin/env python3
"""Benchmark of `eagleconv validate --forward` on the Kimi-K2-sized drafter, side by side with `cp -r` (issue 7 §5).

Uses bench.py's checkpoint (2.38 GB bf16 SpecForge-layout EAGLE-3, no
embed_tokens: the forward generates seeded rows for the tokens it uses),
built once into benchmarks/.cache/.  Each repetition runs the pair
(`cp -r`, `validate --forward`) with the order alternating and the
checkpoint evicted from the page cache before each command, and reports the
median and spread of wall time and peak RSS; goals: peak RSS <= 1.5x the
checkpoint's bytes, wall <= 5x `cp -r`.

    python benchmarks/forward.py             # full run (3 pairs)
    python benchmarks/forward.py --quick     # tiny checkpoint: the forward runs and reports finite steps (CI)

Exit 1 when a command fails or (--quick) the forward report is wrong; goals are printed, not enforced.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _bench():
    spec = importlib.util.spec_from_file_location("eagleconv_bench", HERE / "bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny checkpoint, one run, correctness only")
    p.add_argument("--repeat", type=int, default=3, help="alternating (cp -r, validate --forward) pairs")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--cache", type=Path, default=HERE / ".cache")
    p.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = p.parse_args(argv)
    b = _bench()
    tmp = tempfile.TemporaryDirectory(prefix="eagleconv-fwd-bench-") if args.quick else None
    root = Path(tmp.name) if tmp else args.cache / f"kimi-k2-eagle3-v{b.GENERATOR_VERSION}"
    src = root / "drafter"
    try:
        if not (root / "manifest.json").exists():
            if src.exists():
                shutil.rmtree(src)
            root.mkdir(parents=True, exist_ok=True)
            manifest = b.build_checkpoint(src, b.QUICK if args.quick else b.KIMI_K2, False)
            (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
        size = sum(f.stat().st_size for f in src.iterdir())
        work = root / "work"
        work.mkdir(parents=True, exist_ok=True)
        b.byte_compile_eagleconv()
        out, report = work / "out", work / "forward.json"
        cp = ["cp", "-r", str(src), str(out)]
        fwd = ["sh", "-c", '"$@" > "$0"', str(report), *b.eagleconv_cmd(), "validate", str(src), "--forward",
               "--no-numeric", "--steps", str(args.steps), "--json"]
        runs: dict[str, dict[str, list]] = {"cp -r": {"wall": [], "rss": []}, "validate --forward": {"wall": [], "rss": []}}
        problems: list[str] = []
        repeat = 1 if args.quick else max(1, args.repeat)
        cold = not args.quick and b.evict(src)
        for rep in range(repeat):
            order = [("cp -r", cp), ("validate --forward", fwd)]
            for name, argv_ in (order if rep % 2 == 0 else order[::-1]):
                if out.exists():
                    shutil.rmtree(out)
                os.sync()
                if cold:
                    b.evict(src)
                wall, rss, code = b.run_process(argv_, work / "last.log")
                runs[name]["wall"].append(wall)
                runs[name]["rss"].append(rss)
                if code not in (0, 1):  # validate exits 1 on error findings (the static checks), not a failure here
                    problems.append(f"{name}: exit {code}: {(work / 'last.log').read_text(errors='replace')[-1500:]}")
                print(f"  [{rep + 1}/{repeat}] {name:20s} {wall:7.2f} s {rss / 1e6:8.1f} MB  exit {code}", flush=True)
        if out.exists():
            shutil.rmtree(out)
        forward = json.loads(report.read_text()).get("forward") if report.exists() else None
        if not forward or len(forward["steps"]) != args.steps or not all(s["finite"] for s in forward["steps"]):
            problems.append(f"validate --forward did not report {args.steps} finite steps: {forward and forward['steps']}")
        else:
            print(f"forward: compute {forward['compute_dtype']}, {len(forward['steps'])} steps, fed-back RMS "
                  f"{[round(s['feedback_rms'], 3) for s in forward['steps']]}; {forward['inputs']}")
            for note in forward["borrowed"]:
                print(f"  {note}")
    finally:
        if tmp is not None:
            tmp.cleanup()

    def med(name: str, key: str) -> float:
        return statistics.median(runs[name][key])

    print(f"\ncheckpoint {size / 1e9:.2f} GB, {repeat} alternating pair(s), page cache "
          f"{'evicted before each command' if cold else 'warm'}")
    print("| command | wall median (s) | min-max (s) | x cp -r | peak RSS median (MB) | min-max (MB) | x checkpoint bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in runs:
        w, r = runs[name]["wall"], runs[name]["rss"]
        print(f"| `{name}` | {med(name, 'wall'):.2f} | {min(w):.2f}-{max(w):.2f} | "
              f"{med(name, 'wall') / med('cp -r', 'wall'):.2f} | {med(name, 'rss') / 1e6:.0f} | "
              f"{min(r) / 1e6:.0f}-{max(r) / 1e6:.0f} | {med(name, 'rss') / size:.2f} |")
    if not args.quick:
        rss_ratio = max(runs["validate --forward"]["rss"]) / size
        wall_ratio = med("validate --forward", "wall") / med("cp -r", "wall")
        print("\n| goal | measured | goal | result |\n|---|---:|---:|---|")
        print(f"| peak RSS (worst run) / checkpoint bytes | {rss_ratio:.2f}x | <= 1.5x | {'PASS' if rss_ratio <= 1.5 else 'FAIL'} |")
        print(f"| wall / cp -r (medians) | {wall_ratio:.2f}x | <= 5x | {'PASS' if wall_ratio <= 5 else 'FAIL'} |")
    if args.json:
        args.json.write_text(json.dumps({"environment": b.environment(), "checkpoint_bytes": size, "runs": runs,
                                         "steps": args.steps, "cold_cache": cold, "problems": problems}, indent=2))
    for pr in problems:
        print(f"FAILED {pr}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
