"""vLLM's loader renames ``midlayer.`` to ``layers.0.`` (issue 27 item 11): a checkpoint that carries eagleconv's
vllm layout marker with ``midlayer.*`` names runs in vLLM 0.32 exactly as its ``layers.0.*`` original (the parity
tier's "midlayer.* names under eagleconv's vllm marker" case), so validate reports one note, not 20 errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.validation.parity import TINY_PAIR, VARIANTS, build_variant

VARIANT = next(v for v in VARIANTS if v.name == "midlayer.* names under eagleconv's vllm marker")


def _json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_midlayer_names_under_the_vllm_marker_are_one_note(tmp_path):
    pytest.importorskip("safetensors")
    drafter = build_variant(VARIANT, tmp_path)
    code, report = _json("validate", str(drafter), "--engine", "vllm", "--target", str(TINY_PAIR / "target"))
    assert code == 0 and report["ok"] and report["format"] == "vllm", report["findings"]
    notes = [f for f in report["findings"] if f["code"] in ("EC003", "EC050")]
    assert [(f["code"], f["severity"], f["effect"]) for f in notes] == [("EC003", "info", "none")], notes
    assert "midlayer. -> layers.0." in notes[0]["message"] and "10 tensor name(s)" in notes[0]["message"]
    # the same findings otherwise as the layers.0.* original
    _, original = _json("validate", str(TINY_PAIR / "eagle3"), "--engine", "vllm", "--target", str(TINY_PAIR / "target"))
    assert [f["code"] for f in report["findings"] if f not in notes] == [f["code"] for f in original["findings"]]


def test_it_computes_what_the_original_computes_and_converts_to_layer_names(tmp_path):
    pytest.importorskip("torch")
    drafter = build_variant(VARIANT, tmp_path)
    code, diff = _json("diff", str(TINY_PAIR / "eagle3"), str(drafter))
    assert code == 0 and diff["identical"], diff
    code, converted = _json("convert", str(drafter), str(tmp_path / "out"), "--to", "vllm")
    assert code == 0, converted
    assert {row["destination"] for row in converted["plan"] if row["source"] and "midlayer." in row["source"]} == {
        row["source"].replace("midlayer.", "layers.0.") for row in converted["plan"]
        if row["source"] and "midlayer." in row["source"]}
    code, again = _json("validate", str(tmp_path / "out"), "--engine", "vllm")
    assert code == 0 and not [f for f in again["findings"] if f["code"] == "EC003"]


def test_without_the_rename_a_stray_name_is_still_an_error(tmp_path):
    """Only the loader's own rename is accepted: another unknown name under the marker stays EC003 error."""
    from safetensors.numpy import load_file, save_file

    drafter = build_variant(VARIANT, tmp_path)
    tensors = load_file(drafter / "model.safetensors")
    tensors["midlayer_typo.fc.weight"] = tensors["fc.weight"]
    save_file(tensors, drafter / "model.safetensors")
    code, report = _json("validate", str(drafter), "--engine", "vllm")
    assert code == 1 and any(f["code"] == "EC003" and f["severity"] == "error" and "midlayer_typo" in f["message"]
                             for f in report["findings"])
