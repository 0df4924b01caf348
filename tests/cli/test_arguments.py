"""Arguments as a user types them: lint takes a directory, --engine lists its choices as accepted, error paths as
typed, and a --json refusal carries its finding code."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.spec.report import ValidationReport


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_lint_takes_a_directory(drafter):
    src = drafter(producer="vllm")
    by_dir, by_file = run("lint", str(src), "--json"), run("lint", str(src / "config.json"), "--json")
    assert by_dir.exit_code == by_file.exit_code == 0, by_dir.output
    a, b = ValidationReport.model_validate_json(by_dir.output), ValidationReport.model_validate_json(by_file.output)
    assert a.path == str(src / "config.json") and a.findings == b.findings and a.format == "vllm"


def test_unknown_engine_lists_choices_as_they_are_accepted(drafter):
    src = drafter(producer="vllm")
    result = run("lint", str(src), "--engine", "vllm:9")
    assert result.exit_code == 2
    choices = result.output.split("choose one of:")[1].strip().split(", ")
    assert "vllm:0.32" in choices and not any(" " in c for c in choices)
    for choice in choices:  # every listed spelling is accepted as typed
        assert run("lint", str(src), "--engine", choice, "--json").exit_code in (0, 1), choice


def test_convert_json_refusal_carries_the_code(drafter, tmp_path):
    src = drafter(producer="vllm")
    cfg = json.loads((src / "config.json").read_text())
    cfg["hidden_size"] = "32"  # EC005
    (src / "config.json").write_text(json.dumps(cfg))
    result = run("convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--json")
    payload = json.loads(result.output.splitlines()[0])
    assert result.exit_code == 1 and payload["code"] == "EC005" and payload["exit_code"] == 1
    assert payload["error"].count("EC005") == 1


def test_error_paths_are_as_the_user_typed_them(drafter, tmp_path, monkeypatch):
    src = drafter(producer="vllm")
    (src / "config.json").write_text("{not json")
    monkeypatch.chdir(src.parent)
    typed = src.name  # relative, as a user types it
    for args in (["inspect", typed], ["validate", typed], ["convert", typed, str(tmp_path / "o"), "--to", "vllm"]):
        result = run(*args)
        line = [ln for ln in result.output.splitlines() if ln.startswith("eagleconv: error:")]
        assert result.exit_code == 2 and len(line) == 1, result.output
        assert line[0].startswith(f"eagleconv: error: {os.path.join(typed, 'config.json')}:"), line[0]
        assert str(tmp_path) not in line[0].split(":")[1]
