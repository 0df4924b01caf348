"""The MLA tier's upgrade and downgrade cases (``.ci/vllm-parity --mla``; issue 32, deliverable 6).

Per target of fixtures/mla-pair (dense, MoE), as a user would run them, written ``--to vllm``:

- ``eagle3`` upgraded to EAGLE-3.1 (``eagleconv.upgrade``: fc_norm + norm_output, calibrated on the target's aux
  states over ``calibration-prompts.json``, refit), and
- ``eagle31`` downgraded to EAGLE-3 (``eagleconv.downgrade --allow-lossy``, calibrated the same way).

The calibration prompts are training rows with the target's greedy continuations (fixtures/mla-pair/calibration.py),
never the held-out prompts the tier decodes.  Each output runs in the tier's one vLLM process (op off) and must equal
``simulate`` exactly, like the converted drafters.  Then the retention: AL - 1 (accepted drafts per verification
round) of the output over its source's, measured in vLLM and in simulate on the same run.  The upgrade's goal is to
keep at least ``RETENTION_GOAL`` of it (docs/upgrade.md); the downgrade's loss is measured and reported, as the
SmolLM2 table does (no goal is set for it).
"""

from __future__ import annotations

import time
from pathlib import Path

RETENTION_GOAL = 0.90
TRANSFORMS = (("eagle3", "upgraded"), ("eagle31", "downgraded"))


def transform_cases(work: Path, pair: Path, targets: tuple[str, ...]) -> list[dict]:
    """The upgraded and downgraded drafters of each target, as op-off vLLM cases (each with the seconds it took)."""
    import json

    import eagleconv

    cases = []
    for kind in targets:
        target, calibration = pair / kind / "target", pair / kind / "calibration-prompts.json"
        for source, what in TRANSFORMS:
            out = work / f"mla-{kind}-{source}-{what}"
            start = time.monotonic()
            if what == "upgraded":
                report = eagleconv.upgrade(pair / kind / source, out, target=target, prompts=calibration, to="vllm",
                                           overwrite=True)
            else:
                report = eagleconv.downgrade(pair / kind / source, out, allow_lossy=True, target=target,
                                             prompts=calibration, to="vllm", overwrite=True)
            if not report.ok:
                raise SystemExit(f"eagleconv could not write {out} from {pair / kind / source}: {report.findings}")
            cases.append({"name": f"mla {kind} {source} {what} (rotary op off)", "drafter": str(out),
                          "target": str(target), "prompts": json.loads((pair / kind / "prompts.json").read_text()),
                          "rotary_op": False, "pair": kind, "base": f"{source} {what}", "source": source,
                          "transform": what, "transform_seconds": round(time.monotonic() - start, 1)})
    return cases


def accepted_per_round(run: dict) -> float | None:
    """AL - 1: accepted drafts per verification round (None when the run failed or never drafted)."""
    if run.get("status") != "ok" or not run.get("num_drafts"):
        return None
    return run["num_accepted_tokens"] / run["num_drafts"]


def retention(cases: list[dict]) -> list[str]:
    """Each transformed drafter's AL - 1 over its source's, in vLLM and in simulate: printed, stored in the case
    (``retention``), and the problems (an upgrade under the goal, or a figure that could not be measured)."""
    sources = {(c["pair"], c["base"]): c for c in cases if not c["rotary_op"] and "transform" not in c}
    problems = []
    for c in cases:
        if "transform" not in c:
            continue
        src = sources[(c["pair"], c["source"])]
        c["retention"] = {}
        for engine in ("vllm", "simulate"):
            before, after = accepted_per_round(src.get(engine, {})), accepted_per_round(c.get(engine, {}))
            if before is None or after is None or before == 0:
                problems.append(f"{c['name']}: AL - 1 not measured in {engine} (source {before}, output {after})")
                continue
            kept = after / before
            c["retention"][engine] = {"source": round(before, 4), "output": round(after, 4), "kept": round(kept, 4)}
            if c["transform"] == "upgraded" and kept < RETENTION_GOAL:
                problems.append(f"{c['name']}: keeps {kept:.0%} of {c['source']}'s AL - 1 in {engine} ({after:.3f} "
                                f"against {before:.3f}); the goal is {RETENTION_GOAL:.0%} (docs/upgrade.md)")
        figures = ", ".join(f"{e} {r['output']:.3f} / {r['source']:.3f} = {r['kept']:.0%}"
                            for e, r in c["retention"].items())
        print(f"[AL-1] {c['pair']} {c['source']} {c['transform']}: AL - 1 kept {figures}"
              + (f" (goal {RETENTION_GOAL:.0%})" if c["transform"] == "upgraded" else " (the downgrade's loss)")
              + f"; written in {c['transform_seconds']} s")
    return problems


def added_seconds(cases: list[dict]) -> str:
    """What these cases add to the tier: writing them, their vLLM engines and their simulate runs."""
    ours = [c for c in cases if "transform" in c]
    write = sum(c["transform_seconds"] for c in ours)
    engines = sum(c.get("vllm", {}).get("seconds", 0.0) for c in ours)
    sims = sum(c.get("simulate", {}).get("seconds", 0.0) for c in ours)
    return (f"upgrade/downgrade cases added {write + engines + sims:.0f} s ({len(ours)} drafters: written in "
            f"{write:.0f} s, vLLM {engines:.0f} s, simulate {sims:.0f} s)")


def transform_record(cases: list[dict]) -> dict:
    """What ``--record`` keeps of these cases (fixtures/mla-pair/vllm-0.32.0-outcomes.json, ``transforms``): vLLM's
    counters, whether simulate equalled vLLM exactly, and the AL - 1 figures."""
    counters = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
    return {c["name"]: {"transform": c["transform"], "source": c["source"], "goal": RETENTION_GOAL
                        if c["transform"] == "upgraded" else None,
                        "vllm": {k: c["vllm"][k] for k in counters} if c["vllm"]["status"] == "ok"
                        else {"error": c["vllm"].get("error", "")[:600]},
                        "exact": not c.get("problems"), "retention": c.get("retention", {})}
            for c in cases if "transform" in c}
