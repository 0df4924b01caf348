"""Refuse early (issue 27 item 9, deliverable 5): a refusal that needs no numbers comes before torch is imported,
any forward pass or any scan, and names the command that helps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
PAIR = FIXTURES / "tiny-pair"

# Run the CLI in-process in a child, then report the exit code, the output and whether torch was ever imported.
CHILD = r"""
import json, sys
from click.testing import CliRunner
from eagleconv.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:])
print(json.dumps([result.exit_code, result.output, "torch" in sys.modules]))
"""


def _refused(*args: str) -> tuple[int, str, bool]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    code, output, torch_imported = json.loads(proc.stdout.splitlines()[-1])
    return code, output, torch_imported


@pytest.mark.parametrize("args,code,says", [
    (["upgrade", str(FIXTURES / "modelopt-llama-eagle3"), "{out}"], 1, "modelopt layout cannot express fc_norm"),
    (["diff", str(PAIR / "eagle3"), "{missing}"], 2, "no such file or directory"),
    (["diff", "{missing}", str(PAIR / "eagle3")], 2, "no such file or directory"),
    (["simulate", "{missing}", "--target", str(PAIR / "target")], 2, "no such file or directory"),
    (["simulate", str(PAIR / "eagle3"), "--target", "{missing}"], 2, "no such file or directory"),
], ids=["upgrade-modelopt", "diff-missing-b", "diff-missing-a", "simulate-missing-drafter", "simulate-missing-target"])
def test_refused_before_torch_is_imported(args, code, says, tmp_path):
    missing = tmp_path / "missing"
    args = [a.format(out=tmp_path / "out", missing=missing) for a in args]
    exit_code, output, torch_imported = _refused(*args)
    assert exit_code == code and says in output, output
    if "{missing}" in " ".join(args) or "missing" in output:
        assert str(missing) in output
    assert not torch_imported
    assert not (tmp_path / "out").exists()


def test_convert_to_eagle_of_a_31_drafter_names_downgrade(tmp_path):
    code, output, _ = _refused("convert", str(FIXTURES / "specforge-llama-eagle31"), str(tmp_path / "out"),
                               "--to", "eagle")
    assert code == 1 and "eagleconv downgrade SRC DST --to eagle" in output, output
    assert not (tmp_path / "out").exists()
    # and what it names works
    code, output, _ = _refused("downgrade", str(FIXTURES / "specforge-llama-eagle31"), str(tmp_path / "out"),
                               "--to", "eagle", "--allow-lossy", "--json")
    assert code == 0 and json.loads(output)["destination_format"] == "eagle", output


def test_downgrade_refuses_lossy_before_capturing_calibration_states(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from eagleconv.eagle31 import api as eagle31
    from eagleconv.errors import ConversionError

    captured = []
    real = eagle31._calibration
    monkeypatch.setattr(eagle31, "_calibration", lambda *a, **k: captured.append(a) or real(*a, **k))
    with pytest.raises(ConversionError, match="--allow-lossy"):
        eagle31.downgrade(PAIR / "eagle31", tmp_path / "out", target=PAIR / "target", prompts=PAIR / "prompts.json")
    assert captured == [] and not (tmp_path / "out").exists()
    eagle31.downgrade(PAIR / "eagle31", tmp_path / "out", target=PAIR / "target", prompts=PAIR / "prompts.json",
                      allow_lossy=True)
    assert len(captured) == 1  # the same call with --allow-lossy does capture them
