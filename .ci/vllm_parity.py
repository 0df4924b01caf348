"""The vLLM parity tier, eagleconv's side (main environment).  Run it through ``.ci/vllm-parity``.

    python .ci/vllm_parity.py --vllm-python VENV/bin/python [--work DIR] [--only NAME ...] [--case-timeout S]
        [--pair DIR] [--num-speculative-tokens K] [--max-tokens N] [--record [--record-file FILE]]
    python .ci/vllm_parity.py --vllm-python VENV/bin/python --mla [--work DIR] [--record]   (.ci/vllm_parity_mla.py)

``--pair`` runs the tier on another pair laid out like fixtures/tiny-pair (target/, eagle3/, eagle31/,
prompts.json), e.g. the SmolLM2 pair that fixtures/smollm2/build.py prints.

1. builds the cases: both drafters of the pair (default tiny-pair) in the vllm layout (as committed) and in the
   speculators layout (converted by eagleconv), eagle3 upgraded to EAGLE-3.1 by eagleconv (calibrated, refit:
   ``upgrade_case``), and every broken variant of eagleconv.validation.parity.VARIANTS;
2. predicts, for each variant, what vLLM 0.32 does (``validate --engine vllm:0.32 --target``);
3. runs real vLLM on every case (.ci/vllm_parity_runner.py in the vLLM virtualenv, one engine per drafter,
   all prompts in one generate call, a timer per case: a hung engine is killed and the runner restarted);
4. checks: vLLM's tokens, counters and every drafted token equal ``simulate``'s for every case that loads (for the
   layout cases with both target runtimes: eagleconv's own forward, the default, and transformers);
   each variant's observed outcome (fails / behaves as intended / differently from its base drafter) equals the
   prediction.  Writes WORK/parity.json and WORK/verdicts.md; exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagleconv.validation.parity import OUTCOME_TEXT, TINY_PAIR, VARIANTS, agrees, build_variant, predict  # noqa: E402

K, MAX_TOKENS = 3, 32
RECORD = TINY_PAIR / "vllm-0.32.0-outcomes.json"


def run_vllm(python: str, request: dict, work: Path, case_timeout: float, runner: str = "vllm_parity_runner.py") -> dict:
    """Run the runner (.ci/RUNNER) until every case has a result; kill it when one case runs past ``case_timeout``."""
    req_path, res_path = work / "vllm-request.json", work / "vllm-result.json"
    req_path.write_text(json.dumps(request))
    if res_path.exists():
        res_path.unlink()
    runner_path = REPO / ".ci" / runner
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_USE_V2_MODEL_RUNNER": "0", "PYTHONPATH": ""}
    names = [c["name"] for c in request["cases"]]
    while True:
        proc = subprocess.Popen([python, str(runner_path), str(req_path), str(res_path)], env=env)
        current, since = None, time.monotonic()
        while proc.poll() is None:
            time.sleep(1)
            state = json.loads(res_path.read_text())["cases"] if res_path.exists() else {}
            running = next((n for n, r in state.items() if r.get("status") == "running"), None)
            if running != current:
                current, since = running, time.monotonic()
            if time.monotonic() - since > case_timeout + (120 if current == names[0] else 0):
                proc.kill()
                proc.wait()
                break
        results = json.loads(res_path.read_text()) if res_path.exists() else {"cases": {}}
        for name, r in results["cases"].items():
            if r.get("status") == "running":
                results["cases"][name] = {"status": "error", "error": f"no result within {case_timeout:.0f} s: the "
                                          "engine hung (killed by the tier's timer)", "seconds": case_timeout}
        res_path.write_text(json.dumps(results))
        if all(n in results["cases"] for n in names):
            return results
        if proc.returncode not in (0, None, -9):
            missing = [n for n in names if n not in results["cases"]]
            for n in missing[:1]:  # the runner itself died on this case: record it and go on
                results["cases"][n] = {"status": "error", "error": f"the vLLM process died (exit {proc.returncode})"}
            res_path.write_text(json.dumps(results))


def simulate_case(drafter: Path, prompts: list[list[int]], target_runtime: str = "auto", target: Path | None = None,
                  k: int = K, max_tokens: int = MAX_TOKENS) -> dict:
    from eagleconv.errors import EagleconvError
    from eagleconv.simulation import simulate

    try:
        report = simulate(drafter, target or TINY_PAIR / "target", prompts, num_speculative_tokens=k,
                          max_tokens=max_tokens, target_runtime=target_runtime)
    except EagleconvError as exc:  # SimulateError (vLLM would fail), or an input simulate refuses
        return {"status": "error", "error": exc.message}
    return {"status": "ok", **report.model_dump()}


def upgrade_case(pair: Path, work: Path, calibration_prompts: Path) -> dict:
    """PAIR/eagle3 upgraded as a user would (fc_norm + norm_output, calibrated on the target, refit): vLLM must run it
    as EAGLE-3.1 and draft exactly what simulate says, so the upgrade table's simulate numbers are vLLM's."""
    import eagleconv

    out = work / "eagle3-upgraded"
    eagleconv.upgrade(pair / "eagle3", out, target=pair / "target", prompts=calibration_prompts, overwrite=True)
    return {"name": "eagle3 upgraded (calibrated fc_norm, refit)", "drafter": str(out), "kind": "upgrade",
            "base": "eagle3"}


def max_model_len_cases(pair: Path, work: Path, prompts: list[list[int]], max_tokens: int) -> list[dict]:
    """simulate stops where vLLM stops (issue 28): the pair's target with max_position_embeddings lowered so that
    every prompt's output is cut by max_model_len (vLLM derives it from the config: max_model_len=None), and a
    prompt of max_model_len tokens, which vLLM's input processor refuses and simulate refuses too."""
    import shutil

    longest = max(len(p) for p in prompts)
    positions = longest + max(2, max_tokens // 4)
    target = work / "target-short-context"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(pair / "target", target)
    cfg = json.loads((target / "config.json").read_text())
    cfg["max_position_embeddings"] = positions
    (target / "config.json").write_text(json.dumps(cfg))
    drafter = str(pair / "eagle3")
    return [{"name": f"max_model_len {positions}: output cut at the target's context", "drafter": drafter,
             "kind": "context", "base": "eagle3", "target": str(target), "prompts": prompts, "max_model_len": None},
            {"name": f"max_model_len {positions}: a prompt of {positions} tokens is refused", "drafter": drafter,
             "kind": "context", "base": "eagle3", "target": str(target),
             "prompts": [(prompts[0] * (positions // len(prompts[0]) + 1))[:positions]], "max_model_len": None,
             "expect": "refused"}]


CONTEXT_GAP = ("near max_model_len vLLM drafts less: its scheduler truncates drafts that would pass max_model_len, "
               "and its runner skips drafting for the whole batch once a sequence + K passes the drafter's "
               "max_model_len; simulate's counters do not model that (its tokens do: they stop where vLLM's stop)")
COMPARED = ("tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position", "drafts")


def compare(vllm: dict, sim: dict) -> list[str]:
    if sim["status"] != "ok":
        return [f"simulate refused: {sim['error']}"]
    return [f"{key}: vLLM {vllm.get(key)} != simulate {sim.get(key)}" for key in COMPARED if vllm.get(key) != sim.get(key)]


def observed(result: dict, base: dict) -> str:
    if result["status"] != "ok":
        return "fails"
    same = all(result.get(k) == base.get(k) for k in COMPARED)
    return "intended" if same else "differs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True, help="python of the vLLM virtualenv (.ci/vllm-env)")
    ap.add_argument("--work", type=Path, help="working directory (default: a temporary one)")
    ap.add_argument("--only", action="append", default=[], help="run only cases whose name contains this")
    ap.add_argument("--case-timeout", type=float, default=300.0)
    ap.add_argument("--record", action="store_true",
                    help="write what vLLM did with each variant to --record-file (read by the tests)")
    ap.add_argument("--record-file", type=Path, default=RECORD,
                    help=f"where --record writes (default: {RECORD.relative_to(REPO)})")
    ap.add_argument("--pair", type=Path, default=TINY_PAIR,
                    help="the pair: a directory with target/, eagle3/, eagle31/ and prompts.json (default: tiny-pair)")
    ap.add_argument("--num-speculative-tokens", type=int, default=K, help=f"K (default {K})")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help=f"tokens per prompt (default {MAX_TOKENS})")
    ap.add_argument("--mla", action="store_true", help="run fixtures/mla-pair instead (.ci/vllm_parity_mla.py)")
    args = ap.parse_args(argv)
    if args.mla:  # the MLA pair: its own cases, checks and record (.ci/vllm_parity_mla.py)
        from vllm_parity_mla import mla_main

        args.work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-vllm-parity-mla-"))
        args.work.mkdir(parents=True, exist_ok=True)
        return mla_main(args, run_vllm, simulate_case, compare)
    if args.record and args.pair.resolve() != TINY_PAIR.resolve() and args.record_file == RECORD:
        ap.error("--record with --pair needs its own --record-file (the default one is tiny-pair's)")
    work = args.work or Path(tempfile.mkdtemp(prefix="eagleconv-vllm-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    pair, k, max_tokens = args.pair, args.num_speculative_tokens, args.max_tokens
    prompts = json.loads((pair / "prompts.json").read_text())
    target = pair / "target"

    from eagleconv.conversion import convert

    cases: list[dict] = []
    for base in ("eagle3", "eagle31"):
        cases.append({"name": f"{base} (vllm layout)", "drafter": str(pair / base), "kind": "layout", "base": base})
        spec_dir = work / f"{base}-speculators"
        report = convert(pair / base, spec_dir, "speculators", overwrite=True)
        if not report.ok:
            print(f"eagleconv could not convert {base} to speculators: {report.findings}", file=sys.stderr)
            return 1
        cases.append({"name": f"{base} (speculators layout)", "drafter": str(spec_dir), "kind": "layout", "base": base})
    for v in VARIANTS:
        path = build_variant(v, work, pair)
        outcome, why = predict(path, target)
        cases.append({"name": v.name, "drafter": str(path), "kind": "variant", "base": v.base, "what": v.what,
                      "predicted": outcome, "findings": why, "known_gap": v.known_gap})
    if not args.only or any(o in "eagle3 upgraded" for o in args.only):  # (the upgrade runs the target: skip it unasked)
        cases.append(upgrade_case(pair, work, pair / "prompts.json"))
    cases += max_model_len_cases(pair, work, prompts, max_tokens)
    if args.only:
        cases = [c for c in cases if c["kind"] == "layout" and any(o in c["name"] for o in args.only + ["vllm layout"])
                 or any(o in c["name"] for o in args.only)]

    start = time.monotonic()
    results = run_vllm(args.vllm_python, {"target": str(target), "prompts": prompts, "num_speculative_tokens": k,
                                          "max_tokens": max_tokens,
                                          "cases": [{k: c[k] for k in ("name", "drafter", "target", "prompts",
                                                                       "max_model_len") if k in c} for c in cases]},
                       work, args.case_timeout)
    vllm_seconds = time.monotonic() - start
    failures: list[str] = []
    known: list[str] = []
    bases = {c["base"]: results["cases"][c["name"]] for c in cases if c["kind"] == "layout" and "vllm" in c["name"]}
    rows = []
    for c in cases:
        r = results["cases"][c["name"]]
        c["vllm"] = {k: v for k, v in r.items() if k != "traceback"}
        if c["kind"] == "context":  # its own target and prompts; simulate runs whatever vLLM did
            sim = simulate_case(Path(c["drafter"]), c["prompts"], "auto", Path(c["target"]), k, max_tokens)
        else:
            sim = simulate_case(Path(c["drafter"]), prompts, "auto", target, k, max_tokens) if r["status"] == "ok" \
                else None
        c["simulate"] = sim
        problems = compare(r, sim) if sim is not None else []
        if c["kind"] == "layout":
            if r["status"] != "ok":
                problems.append(f"vLLM failed: {r.get('error')}")
            elif not any(p.startswith("drafts") or p.startswith("num_") for p in problems) and \
                    r.get("drafts") != bases[c["base"]].get("drafts"):
                problems.append("the speculators layout drafts differently from the vllm layout")
            if r["status"] == "ok":  # both target runtimes: the default (eagleconv's own forward) and transformers
                if sim is not None and sim["status"] == "ok" and sim["target_runtime"] != "eagleconv":
                    problems.append(f"simulate's auto runtime fell back to {sim['target_runtime']}: {sim['notes']}")
                problems += [f"(transformers target) {p}" for p in compare(r, simulate_case(
                    Path(c["drafter"]), prompts, "transformers", target, k, max_tokens))]
        elif c["kind"] == "context":
            if c.get("expect") == "refused":
                problems = [] if r["status"] != "ok" and sim["status"] != "ok" else [
                    f"expected both to refuse the prompt: vLLM {r['status']} ({r.get('error', '')[:200]}), "
                    f"simulate {sim['status']} ({sim.get('error', '')[:200]})"]
            elif r["status"] != "ok":
                problems.append(f"vLLM failed: {r.get('error')}")
            else:  # the tokens (where generation stops) must agree; the counters near the end are a known gap
                c["known_gap"] = CONTEXT_GAP
                c["known"] = [p for p in problems if not p.startswith(("tokens", "simulate refused"))]
                known += [f"{c['name']}: {p}" for p in c["known"]]
                problems = [p for p in problems if p.startswith(("tokens", "simulate refused"))]
        elif c["kind"] == "upgrade":
            if r["status"] != "ok":
                problems.append(f"vLLM failed on the upgraded drafter: {r.get('error')}")
        else:
            # a failure needs no base to compare with; a run that loads is judged against its base drafter's run
            c["observed"] = observed(r, bases[c["base"]]) if r["status"] != "ok" or bases[c["base"]]["status"] == "ok" \
                else "unknown"
            if not agrees(c["predicted"], c["observed"]):
                problems.append(f"eagleconv predicted '{OUTCOME_TEXT[c['predicted']]}', vLLM: "
                                f"{OUTCOME_TEXT.get(c['observed'], c['observed'])}")
            if r["status"] == "ok" and sim is not None and sim["status"] != "ok" and "uninitialised" in sim["error"]:
                problems = [p for p in problems if not p.startswith("simulate refused")]  # unpredictable by design
            if problems and c["known_gap"]:
                c["known"] = problems
                known += [f"{c['name']}: {p}" for p in problems]
                problems = []
        c["problems"] = problems
        failures += [f"{c['name']}: {p}" for p in problems]
        rows.append(c)
        status = "FAIL" if problems else "KNOWN" if c.get("known") else "OK  "
        vr = r if r["status"] == "ok" else None
        counters = (f"drafts {vr['num_drafts']}, accepted {vr['num_accepted_tokens']}/{vr['num_draft_tokens']}, "
                    f"per position {vr['accepted_per_position']}") if vr else f"vLLM: {r.get('error', '')[:160]}"
        print(f"[{status}] {c['name']}: {counters}" + (f" | predicted {c['predicted']}, observed {c['observed']}"
                                                        if c["kind"] == "variant" else ""))
        for p in problems + c.get("known", []):
            print(f"         {p[:400]}")
        if c.get("known"):
            print(f"         known gap: {c['known_gap']}")
    (work / "parity.json").write_text(json.dumps({"vllm": results.get("vllm"), "vllm_seconds": vllm_seconds,
                                                  "cases": rows}, indent=1))
    (work / "verdicts.md").write_text(verdict_table(rows))
    if args.record:
        # With --only, the cases not run keep what the record says about them.
        record = args.record_file
        kept = json.loads(record.read_text())["outcomes"] if args.only and record.exists() else {}
        record.write_text(json.dumps({
            "vllm": results.get("vllm"), "runner": "V1 (VLLM_USE_V2_MODEL_RUNNER=0, CPU)", "num_speculative_tokens": k,
            "max_tokens": max_tokens,
            "outcomes": {**kept, **{c["name"]: {
                "observed": c["observed"], "what": c["what"], "known_gap": c["known_gap"],
                "vllm": ({k: c["vllm"][k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                                   "accepted_per_position")} if c["vllm"]["status"] == "ok"
                         else {"error": c["vllm"].get("error", "")[:600]}),
                "eagleconv": {"predicted": c["predicted"], "findings": c["findings"]},
            } for c in rows if c["kind"] == "variant"}},
        }, indent=1) + "\n")
    print(f"\n{len(rows)} cases, {len(failures)} problems, {len(known)} known gaps (listed above); vLLM took {vllm_seconds:.0f} s; details in {work}")
    return 1 if failures else 0


def verdict_table(rows: list[dict]) -> str:
    lines = ["| variant | eagleconv's finding | what vLLM 0.32.0 did |", "|---|---|---|"]
    for c in rows:
        if c["kind"] != "variant":
            continue
        r = c["vllm"]
        if r["status"] != "ok":
            did = f"fails: `{r.get('error', '').splitlines()[0][:140]}`"
        else:
            did = (f"{OUTCOME_TEXT[c['observed']]}: {r['num_accepted_tokens']}/{r['num_draft_tokens']} drafts "
                   f"accepted, per position {r['accepted_per_position']}")
        first = c["findings"][0][:140].replace("|", "\\|") if c["findings"] else "no finding"
        lines.append(f"| {c['name']} | **{OUTCOME_TEXT[c['predicted']]}** ({first}) | {did} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
