#!/usr/bin/env python3
"""What ``upgrade`` and ``downgrade`` cost in acceptance, measured with ``simulate`` on a trained pair.

    python benchmarks/upgrade_quality.py PAIR [--calibration-prompts FILE | --calibration FILE] [-k 3]
        [--max-tokens 64] [--only NAME] [--json OUT]

PAIR holds ``target/``, ``eagle3/``, ``eagle31/`` and ``prompts.json`` (held-out prompts), as
``fixtures/smollm2/build.py`` writes it.  The calibration states are the target's on training prompts:
``--calibration-prompts`` (a JSON list of token-id lists), else the first CALIBRATION_PROMPTS of the build's
own training prompts (``fixtures/smollm2/build.py``).  They are captured once into a calibration file that every
variant reads.  Each variant is written by eagleconv, then simulated on ``prompts.json``.

The table: AL (acceptance length), acceptance per draft position (accepted / drafts), and retention, the
variant's accepted tokens per draft (AL - 1) over its source's (eagle3 for upgrades, eagle31 for downgrades).
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

CALIBRATION_PROMPTS = 64
# name -> (source drafter, operation, keyword arguments; "calibration" is replaced by the captured file)
VARIANTS: dict[str, tuple[str, str | None, dict]] = {
    "eagle3": ("eagle3", None, {}),
    "upgrade fc_norm, calibrated + refit": ("eagle3", "upgrade", {"style": "fc_norm", "calibration": True}),
    "upgrade norm_before_fc, calibrated + refit": ("eagle3", "upgrade", {"style": "norm_before_fc",
                                                                         "calibration": True}),
    "upgrade fc_norm, no calibration": ("eagle3", "upgrade", {"style": "fc_norm"}),
    "upgrade fc_norm, calibrated, no refit": ("eagle3", "upgrade", {"style": "fc_norm", "calibration": True,
                                                                    "refit": False}),
    "upgrade fc_norm --no-norm-output, calibrated + refit": ("eagle3", "upgrade", {"style": "fc_norm",
                                                                                   "norm_output": False,
                                                                                   "calibration": True}),
    "eagle31": ("eagle31", None, {}),
    "downgrade --allow-lossy, calibrated": ("eagle31", "downgrade", {"allow_lossy": True, "calibration": True}),
    "downgrade --allow-lossy, no calibration": ("eagle31", "downgrade", {"allow_lossy": True}),
    "upgrade fc_norm --no-norm-output, no calibration": ("eagle3", "upgrade", {"style": "fc_norm",
                                                                               "norm_output": False}),
}
BASELINE = {"eagle3": "eagle3", "eagle31": "eagle31"}  # retention is against the variant's source drafter


def training_prompts(pair: Path, count: int) -> list[list[int]]:
    """The first ``count`` of the build's training prompts (fixtures/smollm2/build.py), chat-formatted."""
    build_py = REPO / "fixtures" / "smollm2" / "build.py"
    if not build_py.exists():
        raise SystemExit(f"{build_py} is absent: pass --calibration-prompts FILE")
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("smollm2_build", build_py)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    tokenizer = AutoTokenizer.from_pretrained(pair / "target")
    questions = build.questions(build.stdlib_docs())[:min(count, build.N_TRAIN)]
    return [build.chat_ids(tokenizer, q) for q in questions]


def capture(pair: Path, prompts: list[list[int]], work: Path) -> Path:
    import eagleconv
    from eagleconv.forward import default_aux_ids
    from eagleconv.readers.loading import load_drafter

    loaded = load_drafter(pair / "eagle3")
    try:
        layers = sorted(default_aux_ids(loaded.require_spec()))
    finally:
        loaded.close()
    path = work / "calibration.safetensors"
    eagleconv.capture_aux_states(pair / "target", prompts, layers, save_to=path, overwrite=True)
    return path


def row(name: str, report, baseline: dict | None) -> dict:
    drafts = report.num_drafts
    out = {"variant": name, "acceptance_length": report.acceptance_length, "num_drafts": drafts,
           "accepted_per_position": report.accepted_per_position,
           "acceptance_per_position": [a / drafts if drafts else 0.0 for a in report.accepted_per_position]}
    if baseline is not None and baseline["acceptance_length"] > 1:
        out["retention"] = (report.acceptance_length - 1) / (baseline["acceptance_length"] - 1)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| drafter | AL | acceptance per position | AL - 1 kept |", "|---|---|---|---|"]
    for r in rows:
        per = ", ".join(f"{a:.2f}" for a in r["acceptance_per_position"])
        kept = f"{r['retention']:.0%}" if "retention" in r else "-"
        lines.append(f"| {r['variant']} | {r['acceptance_length']:.3f} | {per} | {kept} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pair", type=Path, help="directory with target/, eagle3/, eagle31/, prompts.json")
    ap.add_argument("--calibration-prompts", type=Path, help="JSON list of token-id lists to capture states on")
    ap.add_argument("--calibration", type=Path, help="a calibration file already captured (skips the capture)")
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--only", action="append", default=[], help="run only variants whose name contains this")
    ap.add_argument("--work", type=Path, help="where the variants are written (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    import eagleconv
    from eagleconv.simulation import simulate

    work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-upgrade-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    pair = args.pair
    prompts: list[list[int]] = []
    if args.calibration is not None:
        calibration = args.calibration
        print(f"calibration: {calibration}", flush=True)
    else:
        prompts = (json.loads(args.calibration_prompts.read_text()) if args.calibration_prompts
                   else training_prompts(pair, CALIBRATION_PROMPTS))
        calibration = capture(pair, prompts, work)
        print(f"calibration: {len(prompts)} training prompts -> {calibration}", flush=True)
    names = [n for n in VARIANTS if not args.only or any(o in n for o in args.only) or n in BASELINE]
    rows: dict[str, dict] = {}
    for name in names:
        source, operation, kwargs = VARIANTS[name]
        drafter = pair / source
        t0 = time.monotonic()
        if operation is not None:
            kwargs = dict(kwargs)
            if kwargs.pop("calibration", False):
                kwargs.update(calibration=calibration, target=pair / "target")
            drafter = work / name.replace(" ", "_").replace(",", "").replace("+", "and")
            run = eagleconv.upgrade if operation == "upgrade" else eagleconv.downgrade
            report = run(pair / source, drafter, overwrite=True, **kwargs)
            for r in getattr(report, "refits", []):
                print(f"  refit {', '.join(r.tensors)}: residual {r.residual_before:.3g} -> {r.residual_after:.3g}"
                      + (f" (held out {r.residual_held_out:.3g})" if r.residual_held_out is not None else ""))
        sim = simulate(drafter, pair / "target", pair / "prompts.json",
                                 num_speculative_tokens=args.num_speculative_tokens, max_tokens=args.max_tokens)
        rows[name] = row(name, sim, rows.get(BASELINE[source]) if name not in BASELINE else None)
        r = rows[name]
        print(f"{name}: AL {r['acceptance_length']:.3f}, per position {r['accepted_per_position']} of "
              f"{r['num_drafts']} drafts" + (f", keeps {r['retention']:.1%} of AL - 1" if "retention" in r else "")
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
        if args.json:  # after every row: a long run that is stopped keeps what it measured
            args.json.write_text(json.dumps({"pair": str(pair), "num_speculative_tokens": args.num_speculative_tokens,
                                             "max_tokens": args.max_tokens, "calibration_prompts": len(prompts),
                                             "rows": list(rows.values())}, indent=1) + "\n")
    print()
    print(table(list(rows.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
