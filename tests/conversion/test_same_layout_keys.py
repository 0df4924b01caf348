"""Converting a layout into itself keeps the layout's own top-level keys (issue 27 item 7): speculators'
``embed_requires_grad`` sits beside, not inside, ``transformer_layer_config``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from eagleconv.cli.main import cli

SPECULATORS = Path(__file__).resolve().parents[2] / "fixtures" / "speculators-llama-eagle31"


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(SPECULATORS, src)
    config = json.loads((src / "config.json").read_text())
    config["embed_requires_grad"] = not config.get("embed_requires_grad", False)  # a value no default supplies
    (src / "config.json").write_text(json.dumps(config))
    return src


def _run(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_speculators_to_speculators_and_downgrade_keep_embed_requires_grad(tmp_path):
    src = _source(tmp_path)
    stated = json.loads((src / "config.json").read_text())["embed_requires_grad"]
    for args in (["convert", str(src), str(tmp_path / "same"), "--to", "speculators"],
                 ["downgrade", str(src), str(tmp_path / "down"), "--allow-lossy"]):
        report = _run(*args)
        assert not [c for c in report["config_changes"] if "embed_requires_grad" in c], report["config_changes"]
        written = json.loads((Path(args[2]) / "config.json").read_text())
        assert written["embed_requires_grad"] == stated and "embed_requires_grad" not in written[
            "transformer_layer_config"]
    # another layout has no place for it: still reported as dropped
    report = _run("convert", str(src), str(tmp_path / "vllm"), "--to", "vllm")
    assert any(c.startswith("dropped config field embed_requires_grad") for c in report["config_changes"])
