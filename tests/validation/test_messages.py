"""Messages a new user reads (issue 27): each names what is there and the way out, once."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from eagleconv.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
QWEN = REPO / "fixtures" / "vllm-qwen3-eagle31"


def _findings(*args: str) -> list[dict]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)["findings"]


def _config(tmp_path: Path, **edits) -> Path:
    config = json.loads((QWEN / "config.json").read_text())
    for key, value in edits.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


# -- item 5: ids at a key SGLang does not read ---------------------------------------------------------------------

def test_sglang_says_the_ids_are_there_and_where_it_looks(tmp_path):
    ids = json.loads((QWEN / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    (ec010,) = [f for f in _findings("lint", str(QWEN / "config.json"), "--engine", "sglang") if f["code"] == "EC010"]
    message = ec010["message"]
    assert f"eagle_aux_hidden_state_layer_ids = {ids}" in message
    assert "reads them only from eagle_config.eagle_aux_hidden_state_layer_ids" in message
    assert "no aux layer ids in the config" not in message and "--aux-layer-ids" not in message
    # no ids anywhere: still "no aux layer ids", with the convert option that stamps them
    (ec010,) = [f for f in _findings("lint", str(_config(tmp_path, eagle_aux_hidden_state_layer_ids=None)),
                                     "--engine", "sglang") if f["code"] == "EC010"]
    assert ec010["message"].startswith("no aux layer ids in the config") and "--aux-layer-ids" in ec010["message"]


# -- item 6: one typo, one finding ----------------------------------------------------------------------------------

def test_one_typo_of_hidden_size_is_one_finding(tmp_path):
    config = json.loads((QWEN / "config.json").read_text())
    # target_hidden_size unstated: it defaults to hidden_size, which the typo hides
    path = _config(tmp_path, hidden_size=None, hiden_size=config["hidden_size"], target_hidden_size=None)
    findings = [f for f in _findings("lint", str(path)) if f["code"] in ("EC004", "EC006")]
    assert [(f["code"], f["severity"]) for f in findings] == [("EC006", "error")], findings
    assert "'hiden_size'" in findings[0]["message"] and "'hidden_size'" in findings[0]["message"]
    # with the tensors (validate) as well
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    for f in QWEN.glob("*.safetensors"):
        (checkpoint / f.name).write_bytes(f.read_bytes())
    (checkpoint / "config.json").write_text(path.read_text())
    findings = [f for f in _findings("validate", str(checkpoint), "--no-numeric") if f["code"] in ("EC004", "EC006")]
    assert [f["code"] for f in findings] == ["EC006"], findings


def test_lint_does_not_blame_the_tensors_it_never_read(tmp_path):
    """A field truly absent (no typo) is EC004 in lint, worded for a config without tensors."""
    findings = [f for f in _findings("lint", str(_config(tmp_path, hidden_size=None))) if f["code"] == "EC004"]
    assert [f["message"] for f in findings] == ["hidden_size is absent from config (lint reads no tensors to derive "
                                                "it from)"]
