"""``validate --target`` reads the target's config.json itself (issue 35 item 6): importing transformers only to
read three numbers cost 6-20x the rest of the command once the ``[forward]`` extra was installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eagleconv.errors import FormatError
from eagleconv.config.target import load_target

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"

CHILD = r"""
import json, sys
from click.testing import CliRunner
from eagleconv.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:])
print(json.dumps([result.exit_code, result.output, sorted(m for m in ("transformers", "torch") if m in sys.modules)]))
"""


def test_validate_target_never_imports_transformers():
    pytest.importorskip("transformers")  # where it is not installed it cannot be imported either
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CHILD, "validate", str(PAIR / "eagle3"), "--target",
                           str(PAIR / "target"), "--no-numeric"], capture_output=True, text=True, env=env, timeout=300)
    code, output, imported = json.loads(proc.stdout.splitlines()[-1])
    assert code == 0, output
    assert imported == [], f"validate --target imported {imported}"


def test_the_numbers_are_the_configs_own(tmp_path: Path):
    target = tmp_path / "target"
    shutil.copytree(PAIR / "target", target)
    config = json.loads((target / "config.json").read_text())
    info = load_target(target)
    assert (info.hidden_size, info.vocab_size, info.num_hidden_layers) == (
        config["hidden_size"], config["vocab_size"], config["num_hidden_layers"])
    # GPT-2's spellings, which transformers' attribute_map aliases, read the same
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "vocab_size": 100}
    (target / "config.json").write_text(json.dumps(gpt2))
    info = load_target(target)
    assert (info.hidden_size, info.num_hidden_layers, info.vocab_size) == (64, 3, 100)
    # and a field stated under no name is refused, never a config class's default
    del gpt2["n_layer"]
    (target / "config.json").write_text(json.dumps(gpt2))
    with pytest.raises(FormatError, match="no integer num_hidden_layers"):
        load_target(target)
