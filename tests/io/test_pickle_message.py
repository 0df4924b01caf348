"""Defect 8: a refused pickle's message never passes on torch's advice to lower the guard."""

from __future__ import annotations

import json
import os
import pickle
import re

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli

LOWER_THE_GUARD = re.compile(r"weights_only[`\s]*(=|set to)[`\s]*False|safe_globals|TORCH_FORCE_NO_WEIGHTS_ONLY|"
                             r"will likely succeed|if you trust", re.I)


class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


class Custom:
    """A harmless class: torch names it as an unsupported global and suggests allow-listing it."""


@pytest.mark.parametrize("payload", ["system", "custom"])
def test_refused_pickle_message_keeps_the_reason_and_drops_the_advice(tmp_path, payload):
    import torch

    marker = tmp_path / "pwned"
    value = _Reduce(os.system, (f"touch {marker}",)) if payload == "system" else Custom()
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    torch.save({"fc.weight": torch.zeros(1), "x": value}, d / "pytorch_model.bin", pickle_module=pickle)
    result = CliRunner().invoke(cli, ["inspect", str(d), "--allow-pickle"])
    assert result.exit_code == 2 and not marker.exists()
    line = result.output.strip()
    assert line.startswith("eagleconv: error:") and "pytorch_model.bin" in line
    assert ("system" in line) if payload == "system" else ("Custom" in line), line
    assert not LOWER_THE_GUARD.search(line), line
    assert "never" in line or "not" in line  # it says the guard stays
