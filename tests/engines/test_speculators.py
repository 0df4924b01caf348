"""The speculators 0.9.0 consumer profile: what its loader needs, on real converted files.

The interop tier (.ci/interop) checks the same verdicts against speculators itself.
"""

from __future__ import annotations

from pathlib import Path

import eagleconv
from eagleconv.synthetic import DrafterRecipe, make_drafter, make_target_config


def _errors(path: Path, **kw) -> list[str]:
    report = eagleconv.validate(path, engines=("speculators",), numeric=False, **kw)
    return sorted(f.code for f in report.findings if f.severity == "error")


def test_speculators_profile_is_registered_with_its_version():
    from eagleconv.engines import resolve_engines

    assert [p.label for p in resolve_engines("speculators")] == ["speculators 0.9.0"]
    everything = [p.label for p in resolve_engines("all")]
    assert "speculators 0.9.0" not in everything and "vllm 0.32" in everything  # all = the serving engines


def test_converted_with_a_verifier_is_loadable(tmp_path):
    target = make_target_config(tmp_path / "target")
    for recipe in (DrafterRecipe(producer="specforge", eagle31=True), DrafterRecipe(producer="modelopt"),
                   DrafterRecipe(producer="speculators", norm_before_fc=True)):
        out = tmp_path / f"out-{recipe.producer}"
        eagleconv.convert(make_drafter(tmp_path / recipe.producer, recipe), out, "speculators", verifier=str(target))
        assert _errors(out) == [], recipe


def test_no_verifier_is_an_error_naming_the_fix(tmp_path):
    out = tmp_path / "out"
    eagleconv.convert(make_drafter(tmp_path / "src", DrafterRecipe(producer="specforge")), out, "speculators")
    target = make_target_config(tmp_path / "target")
    report = eagleconv.validate(out, engines=("speculators",), numeric=False, target=target)
    [f] = [f for f in report.findings if f.code == "EC043"]
    assert f.severity == "error" and f"--verifier {target}" in f.message


def test_compressed_vocab_without_t2d_is_an_error(tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    target = make_target_config(tmp_path / "target")
    out = tmp_path / "out"
    eagleconv.convert(make_drafter(tmp_path / "src", DrafterRecipe(producer="modelopt")), out, "speculators",
                      verifier=str(target))
    tensors = load_file(str(out / "model.safetensors"))
    del tensors["t2d"]  # what eagleconv wrote before t2d was derived for speculators
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    assert _errors(out) == ["EC030"]
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 64


def test_other_layouts_are_not_loaded_as_written(tmp_path):
    out = tmp_path / "out"
    eagleconv.convert(make_drafter(tmp_path / "src", DrafterRecipe(producer="specforge", eagle31=True)), out, "vllm")
    assert _errors(out) == ["EC040"]
