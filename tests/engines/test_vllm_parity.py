"""The vLLM parity tier, as seen from pytest.

* Always: eagleconv's prediction for every broken variant equals what real vLLM 0.32.0 did, as the tier last
  recorded it (fixtures/tiny-pair/vllm-0.32.0-outcomes.json, written by ``.ci/vllm-parity --record``).
* With the vLLM virtualenv (``.ci/vllm-env``) and EAGLECONV_VLLM_PARITY=1: one case through real vLLM, compared
  token for token with simulate.  CI runs the whole tier with ``.ci/vllm-parity`` (a line in .ci/run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")

from eagleconv.validation.parity import TINY_PAIR, VARIANTS, agrees, build_variant, outcome_of, predict

REPO = Path(__file__).resolve().parents[2]
RECORD = TINY_PAIR / "vllm-0.32.0-outcomes.json"
VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eagleconv-ci" / "vllm-0.32.0"


def test_matrix_has_every_variant_the_issue_lists():
    assert len(VARIANTS) >= 12
    assert len({v.name for v in VARIANTS}) == len(VARIANTS)


@pytest.mark.parametrize("variant", [v if not v.known_gap else
                                     pytest.param(v, marks=pytest.mark.xfail(reason=v.known_gap, strict=not v.undefined))
                                     for v in VARIANTS], ids=lambda v: v.name)
def test_prediction_matches_what_vllm_did(variant, tmp_path):
    recorded = json.loads(RECORD.read_text())["outcomes"]
    assert variant.name in recorded, f"{variant.name}: not recorded; run .ci/vllm-parity --record"
    outcome, findings = predict(build_variant(variant, tmp_path), TINY_PAIR / "target")
    assert agrees(outcome, recorded[variant.name]["observed"]), (outcome, findings)


def test_absent_aux_ids_are_unverified_where_the_guess_is_well_formed(tmp_path):
    """vLLM guesses (2, L//2, L-3); only the training run knows whether that is right. On tiny-pair's 4 layers the
    guess captures a layer twice (EC011, fails); on a 30-layer target it is well formed, and it was the SmolLM2
    pair's trained ids (fixtures/smollm2/vllm-0.32.0-outcomes.json: intended): "unverified", which agrees with a
    run that loads either way, never with one that fails."""
    variant = next(v for v in VARIANTS if v.name == "no aux ids at all")
    drafter = build_variant(variant, tmp_path)
    assert predict(drafter, TINY_PAIR / "target")[0] == "fails"
    target30 = tmp_path / "target30"
    target30.mkdir()
    config = json.loads((TINY_PAIR / "target" / "config.json").read_text())
    (target30 / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 30}))
    outcome, findings = predict(drafter, target30)
    assert outcome == "unverified" and "[2, 15, 27]" in findings[0], findings
    smollm2 = json.loads((REPO / "fixtures" / "smollm2" / "vllm-0.32.0-outcomes.json").read_text())["outcomes"]
    assert smollm2[variant.name]["observed"] == "intended" and agrees(outcome, "intended")
    assert agrees(outcome, "differs") and not agrees(outcome, "fails") and not agrees("differs", "intended")


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.known_gap], ids=lambda v: v.name)
def test_the_prediction_reads_effects_not_message_text(variant, tmp_path):
    """Blank every message: the prediction is the same, because each finding carries its effect and runner as data."""
    from eagleconv import validate

    report = validate(build_variant(variant, tmp_path), engines=("vllm:0.32",), target=TINY_PAIR / "target", numeric=False)
    blanked = [f.model_copy(update={"message": "-"}) for f in report.findings]
    assert outcome_of(blanked)[0] == outcome_of(report.findings)[0]
    assert agrees(outcome_of(blanked)[0], json.loads(RECORD.read_text())["outcomes"][variant.name]["observed"])
    assert all(f.effect is not None for f in report.findings if f.engine), "every engine finding states its effect"


@pytest.mark.skipif(not (VENV / ".ready").exists(), reason=f"no vLLM virtualenv at {VENV} (create it with .ci/vllm-env)")
@pytest.mark.skipif(os.environ.get("EAGLECONV_VLLM_PARITY") != "1",
                    reason="set EAGLECONV_VLLM_PARITY=1 to start real vLLM from pytest (CI runs .ci/vllm-parity)")
def test_real_vllm_equals_simulate(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / ".ci" / "vllm_parity.py"), "--vllm-python",
                           str(VENV / "bin" / "python"), "--work", str(tmp_path), "--only", "eagle3 (vllm layout)"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "[OK  ] eagle3 (vllm layout)" in proc.stdout
