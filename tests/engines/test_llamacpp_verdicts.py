"""Issue 32 item 8: the five classes where validate --engine llama.cpp disagreed with real llama.cpp b11434.

Each class is one edit of an ``eagle3`` drafter, shared with the parity tier (``.ci/llamacpp_parity.py``
``ISSUE_32``).  ``OBSERVED`` is what llama.cpp b11434 did with each on the SmolLM2 pair (its own converter, then
``llama-speculative-simple``; issue 32, recorded in fixtures/smollm2/llamacpp-b11434-outcomes.json): the fast tests
check validate's prediction against it on the committed tiny pair, the last one reruns the classes through the
binary where a cached build and the SmolLM2 pair exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eagleconv
from eagleconv.conversion import convert
from eagleconv.errors import ConversionError
from eagleconv.formats.gguf import GgufLayout
from eagleconv.readers.loading import load_drafter
from eagleconv.validation.parity import Variant, build_variant, outcome_of

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
sys.path.insert(0, str(REPO / ".ci"))
from llamacpp_parity import ISSUE_32  # noqa: E402

CLASSES = {v.name: v for v in ISSUE_32}
OBSERVED = {  # llama.cpp b11434 on SmolLM2's eagle3 so edited (issue 32)
    "hidden_act gelu": "differs",  # runs, drafting exactly as the SiLU drafter: the stated gelu is not computed
    "rotary_emb.inv_freq buffer": "intended",  # the converter skips the buffer; drafts unchanged
    "attention biases": "fails",  # done_getting_tensors: wrong number of tensors
    "model.-prefixed layer names": "intended",  # the converter's HF tensor map names model.layers.0.* blk.0.*
    "vocab_size padded past the target's": "intended",  # [PAD] tokens; draft vocab is d2t's; drafts unchanged
}


def build(name: str, tmp_path: Path) -> Path:
    return build_variant(CLASSES[name], tmp_path)


def verdict(path: Path, engine: str):
    found = eagleconv.validate(path, engines=(engine,), target=PAIR / "target", numeric=False).findings
    return outcome_of(found)[0], found


def gguf_target(tmp_path: Path) -> Path:
    from tests.formats.test_gguf import target_for

    return target_for(PAIR / "eagle3", tmp_path)


@pytest.mark.parametrize("name", list(OBSERVED))
def test_validate_predicts_what_llamacpp_did(name: str, tmp_path: Path) -> None:
    predicted, found = verdict(build(name, tmp_path), "llama.cpp")
    assert predicted == OBSERVED[name], [f"{f.code} {f.severity} {f.effect}: {f.message}" for f in found]


def test_hidden_act_is_a_finding_for_each_engine_by_what_its_mlp_does(tmp_path: Path) -> None:
    path = build("hidden_act gelu", tmp_path)
    llama = [f for f in verdict(path, "llama.cpp")[1] if f.code == "EC040"]
    assert [(f.severity, f.effect) for f in llama] == [("error", "runs_differently")] and "SiLU" in llama[0].message
    vllm_outcome, vllm = verdict(path, "vllm")  # LlamaMLP raises ValueError('Unsupported activation: gelu')
    assert vllm_outcome == "fails" and any(f.code == "EC040" and f.effect == "load_fails" for f in vllm)
    swish = build_variant(Variant("swish", "eagle3", "hidden_act: swish", lambda c, t: c.update(hidden_act="swish")),
                          tmp_path)  # transformers' other name for SiLU: what llama.cpp computes
    assert verdict(swish, "llama.cpp")[0] == "intended"


def test_model_prefixed_layers_are_read_and_vllm_still_fails_on_them(tmp_path: Path) -> None:
    """vllm-loader.md 3.4: vLLM adds its own model., so model.layers.* becomes model.model.layers.* and raises."""
    path = build("model.-prefixed layer names", tmp_path)
    report = eagleconv.validate(path, engines=("vllm",), target=PAIR / "target", numeric=False)
    assert not any(f.code == "EC002" for f in report.findings)
    assert any(f.code == "EC003" and f.severity == "info" and "another spelling" in f.message for f in report.findings)
    assert outcome_of(report.findings)[0] == "fails"
    out = tmp_path / "vllm"
    convert(path, out, "vllm", numeric=False)
    names = set(load_drafter(out).read.canonical.values())
    assert "layers.0.self_attn.q_proj.weight" in names and not any(n.startswith("model.") for n in names)


def test_padded_vocab_is_a_warning_not_an_error(tmp_path: Path) -> None:
    found = verdict(build("vocab_size padded past the target's", tmp_path), "vllm")[1]
    ec052 = [f for f in found if f.code == "EC052"]
    assert [(f.severity, f.engine) for f in ec052] == [("warning", None)]


def test_convert_to_gguf_drops_and_reports_the_rope_buffer(tmp_path: Path) -> None:
    path = build("rotary_emb.inv_freq buffer", tmp_path)
    report = convert(path, tmp_path / "d.gguf", "gguf", target=gguf_target(tmp_path), numeric=False)
    dropped = [r for r in report.plan if r.source == "layers.0.self_attn.rotary_emb.inv_freq"]
    assert [r.action for r in dropped] == ["drop"] and "RoPE buffer" in (dropped[0].reason or "")
    base = convert(PAIR / "eagle3", tmp_path / "base.gguf", "gguf", target=gguf_target(tmp_path), numeric=False)
    assert [r.destination for r in report.plan if r.destination] == [r.destination for r in base.plan if r.destination]


def test_validate_and_convert_refuse_biases_by_one_table(tmp_path: Path) -> None:
    path = build("attention biases", tmp_path)
    reason = GgufLayout.holding_policy("layers.0.self_attn.q_proj.bias")
    assert reason is not None and reason.policy == "never"
    with pytest.raises(ConversionError, match=reason.reason):
        convert(path, tmp_path / "d.gguf", "gguf", target=gguf_target(tmp_path), numeric=False)
    assert not (tmp_path / "d.gguf").exists()
    found = [f for f in verdict(path, "llama.cpp")[1] if f.effect == "load_fails"]
    assert found and all(reason.reason in f.message for f in found)


@pytest.mark.parametrize("name", ["model.-prefixed layer names", "vocab_size padded past the target's"])
def test_convert_to_gguf_takes_what_llamacpps_converter_takes(name: str, tmp_path: Path) -> None:
    report = convert(build(name, tmp_path), tmp_path / "d.gguf", "gguf", target=gguf_target(tmp_path), numeric=False)
    base = convert(PAIR / "eagle3", tmp_path / "base.gguf", "gguf", target=gguf_target(tmp_path), numeric=False)
    assert sorted(r.destination for r in report.plan if r.destination) == \
        sorted(r.destination for r in base.plan if r.destination)


# -- real llama.cpp ----------------------------------------------------------------------------

from tests.support.ci_cache import llamacpp_build as _build, smollm2_pair as _smollm2  # noqa: E402


@pytest.mark.skipif(_build() is None, reason="no cached llama.cpp b11434 build (.ci/llamacpp-env builds it)")
@pytest.mark.skipif(_smollm2() is None, reason="no SmolLM2 pair (.ci/smollm2 builds it)")
def test_the_five_classes_against_real_llamacpp(tmp_path: Path) -> None:
    """The tier's five cases and the base they compare with (8 tokens, one prompt): llama.cpp's outcome, validate's
    prediction, simulate's drafts. Four spawn llama.cpp's converter and the binary (~25 s each, as the tier's
    recorded cases took), the biased one fails at load (~8 s): about 2 min, the price of rerunning the five where
    the build is cached."""
    build_dir, pair = _build(), _smollm2()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    only = [a for name in OBSERVED for a in ("--only", name)]
    proc = subprocess.run([sys.executable, str(REPO / ".ci" / "llamacpp_parity.py"), "--build", str(build_dir),
                           "--pair", str(pair), "--work", str(tmp_path), *only, "--max-tokens", "8"],
                          capture_output=True, text=True, env=env, timeout=3000)
    outcomes = json.loads((tmp_path / "llamacpp-parity.json").read_text())["outcomes"]
    got = {name: (outcomes[name]["observed"], outcomes[name]["agrees"]) for name in OBSERVED}
    assert got == {name: (seen, True) for name, seen in OBSERVED.items()}, proc.stdout[-3000:]


# -- llama.cpp's own converter (its source is enough: no build) --------------------------------

from tests.formats.test_gguf_llamacpp_converter import _skip_reason, contents, hf_target, theirs  # noqa: E402


@pytest.fixture(scope="module")
def hf_target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf_target(tmp_path_factory.mktemp("hf") / "target", hidden=256, vocab=512)


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
@pytest.mark.parametrize("name", ["rotary_emb.inv_freq buffer", "model.-prefixed layer names"])
def test_llamacpps_converter_writes_what_convert_to_gguf_writes(name: str, hf_target_dir: Path, tmp_path: Path) -> None:
    """The two classes decided in llama.cpp's converter (it skips the buffer; its HF tensor map names
    model.layers.0.* blk.0.*): its GGUF and eagleconv's are equal byte for byte, metadata included. Each case
    spawns their converter (it imports torch and transformers: ~10 s idle, ~30 s on a loaded 2-core machine)."""
    src = build(name, tmp_path / "src")
    done = theirs(src, hf_target_dir, tmp_path / "theirs.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    convert(src, tmp_path / "mine.gguf", "gguf", target=hf_target_dir, outtype="f32", numeric=False)
    assert contents(tmp_path / "mine.gguf") == contents(tmp_path / "theirs.gguf")
