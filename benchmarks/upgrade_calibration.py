#!/usr/bin/env python3
"""How much calibration ``upgrade`` needs: AL - 1 kept against the number of calibration prompts (issue 27, item 12).

    python benchmarks/upgrade_calibration.py PAIR [--counts 1,2,4,8,16,32,64] [--subsets 2] [-k 3]
        [--max-tokens 64] [--json OUT]

PAIR is what ``fixtures/smollm2/build.py`` writes (target/, eagle3/, prompts.json).  The target's aux states are
captured once on the first max(counts) * subsets of the build's training prompts (chat-formatted, none of
``prompts.json``); each point keeps the first N sequences of a subset (subset s starts at prompt s * max(counts),
so the subsets are disjoint), writes them as a calibration file, upgrades eagle3 with it (the default: fc_norm +
norm_output, refit) and simulates the result on ``prompts.json``.  "AL - 1 kept" is the upgrade's accepted
tokens per draft over eagle3's, as in benchmarks/upgrade_quality.py.
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
sys.path.insert(0, str(REPO / "benchmarks"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pair", type=Path)
    ap.add_argument("--counts", default="1,2,4,8,16,32,64", help="calibration prompts per point (comma-separated)")
    ap.add_argument("--subsets", type=int, default=2, help="disjoint prompt subsets per count below the largest")
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--calibration", type=Path, help="a capture of this script's prompts already made (skips it)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import os

    import eagleconv
    from eagleconv.readers.calibration import Calibration, write_calibration
    from eagleconv.simulation import simulate
    from upgrade_quality import capture, training_prompts

    counts = sorted(int(c) for c in args.counts.split(","))
    top = counts[-1]
    pair, work = args.pair, Path(tempfile.mkdtemp(prefix="eagleconv-upgrade-calibration-"))
    prompts = training_prompts(pair, top * args.subsets)  # also for --calibration: their count is recorded
    t0 = time.monotonic()
    path = args.calibration or capture(pair, prompts, work)
    from eagleconv.readers.calibration import load_calibration
    from eagleconv.readers.loading import load_drafter

    loaded = load_drafter(pair / "eagle3")
    try:
        full = load_calibration(path, loaded.require_spec())
    finally:
        loaded.close()
    print(f"captured {len(prompts)} prompts, {full.states.shape[0]} tokens in {time.monotonic() - t0:.0f} s", flush=True)
    starts = [0]
    for n in full.lengths:
        starts.append(starts[-1] + n)

    def simulated(drafter: Path) -> dict:
        r = simulate(drafter, pair / "target", pair / "prompts.json", num_speculative_tokens=args.num_speculative_tokens,
                     max_tokens=args.max_tokens)
        return {"acceptance_length": r.acceptance_length, "num_drafts": r.num_drafts,
                "accepted_per_position": r.accepted_per_position}

    base = simulated(pair / "eagle3")
    print(f"eagle3: AL {base['acceptance_length']:.3f}", flush=True)
    rows: list[dict] = []
    out = {"pair": str(pair), "num_speculative_tokens": args.num_speculative_tokens, "max_tokens": args.max_tokens,
           "captured_prompts": len(prompts), "loadavg_start": os.getloadavg(), "eagle3": base, "rows": rows}
    for count in counts:
        for subset in range(args.subsets if count < top else 1):
            first = subset * top
            lo, hi = starts[first], starts[first + count]
            part = Calibration(full.states[lo:hi], full.lengths[first:first + count],
                               full.tokens[first:first + count] if full.tokens is not None else None,
                               full.layer_ids, f"prompts {first}..{first + count - 1}")
            cal = write_calibration(work / f"cal-{count}-{subset}.safetensors", part, overwrite=True)
            dst = work / f"up-{count}-{subset}"
            t1 = time.monotonic()
            eagleconv.upgrade(pair / "eagle3", dst, overwrite=True, calibration=cal, target=pair / "target")
            t2 = time.monotonic()
            sim = simulated(dst)
            kept = (sim["acceptance_length"] - 1) / (base["acceptance_length"] - 1)
            rows.append({"prompts": count, "subset": subset, "first_prompt": first, "tokens": hi - lo,
                         "retention": kept, "loadavg": os.getloadavg()[0], **sim})
            print(f"{count} prompts (subset {subset}, {hi - lo} tokens): AL {sim['acceptance_length']:.3f}, "
                  f"keeps {kept:.1%} of AL - 1 (upgrade {t2 - t1:.0f} s, simulate {time.monotonic() - t2:.0f} s)", flush=True)
            if args.json:  # after every point: a run that is stopped keeps what it measured
                args.json.write_text(json.dumps(out, indent=1) + "\n")
    print("\n| prompts | tokens | AL | AL - 1 kept |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['prompts']} | {r['tokens']} | {r['acceptance_length']:.3f} | {r['retention']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
