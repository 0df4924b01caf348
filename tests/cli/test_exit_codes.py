"""Defect 4: one exit-code rule for every command (EC001/EC002 are findings: exit 1), and lint/validate
keep analysing a file with a duplicate key the way engines read it (the last value wins)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.spec.report import ValidationReport


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def duplicate_first(path, key: str, first_value) -> None:
    """Prepend ``key: first_value`` to config.json, so the file holds ``key`` twice and the original comes last."""
    text = path.read_text()
    brace = text.index("{")
    path.write_text(text[:brace + 1] + f" {json.dumps(key)}: {json.dumps(first_value)}," + text[brace + 1:])


@pytest.mark.parametrize("command", ["inspect", "convert", "validate"])
def test_duplicate_key_exits_1_everywhere(drafter, tmp_path, command):
    src = drafter(producer="vllm")
    duplicate_first(src / "config.json", "hidden_size", 48)
    args = {"inspect": ["inspect", str(src)], "validate": ["validate", str(src), "--no-numeric"],
            "convert": ["convert", str(src), str(tmp_path / "out"), "--to", "speculators"]}[command]
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "EC001" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["inspect", "convert", "validate"])
def test_not_an_eagle3_drafter_exits_1_everywhere(tmp_path, command):
    import numpy as np
    from safetensors.numpy import save_file

    src = tmp_path / "plain-llama"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    save_file({"model.embed_tokens.weight": np.zeros((8, 4), np.float32)}, str(src / "model.safetensors"))
    args = {"inspect": ["inspect", str(src)], "validate": ["validate", str(src), "--no-numeric"],
            "convert": ["convert", str(src), str(tmp_path / "out"), "--to", "speculators"]}[command]
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "EC002" in result.output
    assert not (tmp_path / "out").exists()


def test_lint_reads_last_value_and_reports_everything_at_once(drafter):
    config = drafter(producer="vllm") / "config.json"
    cfg = json.loads(config.read_text())
    del cfg["intermediate_size"]  # a second, independent problem: EC004
    config.write_text(json.dumps(cfg))
    duplicate_first(config, "hidden_size", 48)
    report = ValidationReport.model_validate_json(run("lint", str(config), "--json").output)
    codes = {f.code for f in report.findings if f.severity == "error"}
    assert {"EC001", "EC004"} <= codes
    assert report.format == "vllm"  # analysis went on after EC001
    dup = next(f for f in report.findings if f.code == "EC001")
    assert "'hidden_size'" in dup.message and "last value" in dup.message


def test_validate_reads_last_value_like_the_engines(drafter):
    """The first hidden_size is wrong, the last is right: only EC001 remains, no shape error."""
    src = drafter(producer="vllm")
    duplicate_first(src / "config.json", "hidden_size", 48)
    result = run("validate", str(src), "--no-numeric", "--json")
    report = ValidationReport.model_validate_json(result.output)
    assert result.exit_code == 1
    assert {f.code for f in report.findings if f.severity == "error"} == {"EC001"}
    assert report.format == "vllm" and report.aux_layer_ids == [2, 8, 13]
