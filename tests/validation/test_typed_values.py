"""Defect 5: a config value of the wrong JSON type is a finding (engines differ on it), never coerced silently."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import edit_config
from eagleconv.cli.main import cli
from eagleconv.spec.report import ValidationReport


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def ec005(result) -> list[str]:
    report = ValidationReport.model_validate_json(result.output)
    return [f.message for f in report.findings if f.code == "EC005" and f.severity == "error"]


@pytest.mark.parametrize("key,value", [("hidden_size", "32"), ("hidden_size", 32.0), ("intermediate_size", "64"),
                                       ("num_hidden_layers", True), ("fc_norm", "true"), ("norm_output", 1)])
def test_wrongly_typed_value_is_reported_and_not_converted(drafter, tmp_path, key, value):
    src = drafter(producer="vllm", eagle31=True)
    edit_config(src, **{key: value})
    result = run("validate", str(src), "--no-numeric", "--json")
    assert result.exit_code == 1, result.output
    messages = ec005(result)
    assert len(messages) == 1 and key in messages[0] and json.dumps(value) in messages[0], messages
    lint = run("lint", str(src / "config.json"), "--json")
    assert lint.exit_code == 1 and len(ec005(lint)) == 1
    out = tmp_path / "out"
    converted = run("convert", str(src), str(out), "--to", "speculators")
    assert converted.exit_code == 1 and "EC005" in converted.output and not out.exists()


def test_correctly_typed_values_are_clean(drafter):
    src = drafter(producer="vllm", eagle31=True)
    result = run("validate", str(src), "--no-numeric", "--json")
    assert result.exit_code == 0 and ec005(result) == []


def test_aux_ids_must_be_integers(drafter):
    src = drafter(producer="vllm")
    cfg = json.loads((src / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, "8", 13.0]
    (src / "config.json").write_text(json.dumps(cfg))
    messages = ec005(run("validate", str(src), "--no-numeric", "--json"))
    assert len(messages) == 1 and "eagle_aux_hidden_state_layer_ids" in messages[0]


@pytest.mark.parametrize("architecture", ["llama", "deepseek_mla"])
@pytest.mark.parametrize("key,value", [("architectures", [None]), ("architectures", [[]]), ("architectures", True),
                                       ("model_type", []), ("eagle_aux_hidden_state_layer_ids", [None])])
def test_malformed_values_are_findings_not_crashes(drafter, key, value, architecture):
    """Found by the property tests: these crashed lint and validate with a TypeError."""
    src = drafter(producer="vllm", architecture=architecture)
    edit_config(src, **{key: value})
    for result in (run("lint", str(src / "config.json"), "--engine", "all", "--json"),
                   run("validate", str(src), "--engine", "all", "--no-numeric", "--json")):
        assert result.exit_code == 1, result.output
        assert any(key in m for m in ec005(result)), result.output


def test_speculators_layer_model_type_not_a_string_is_a_finding(drafter):
    """Found by the soak run: vLLM's speculators translation was modelled with a set lookup that crashed."""
    src = drafter(producer="speculators")
    cfg = json.loads((src / "config.json").read_text())
    cfg["transformer_layer_config"]["model_type"] = []
    (src / "config.json").write_text(json.dumps(cfg))
    result = run("validate", str(src), "--engine", "all", "--no-numeric", "--json")
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output and ec005(result), result.output
